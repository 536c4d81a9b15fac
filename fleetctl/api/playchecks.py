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


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """``did you mean NAME?`` for an extra var nothing reads: the closest of Ansible's names and
    ``candidates`` together (``ansible_usr`` and ``ansbile_user`` -> ``ansible_user``, ``arhcs`` ->
    ``archs``), by difflib's ratio (cutoff 0.6), in which a transposition costs as little as one
    missing letter; ``None`` when none is close. Deploy's warnings and ``fleetctl run``'s use it.

    The candidates are never chosen by the name's own prefix: a misspelt prefix (``ansbile_``) is
    exactly the typo to name (operator's trial: ``-e ansbile_user=x`` got no suggestion).

    A hint never points at a name fleetctl then refuses or ignores: when the closest is one of
    Ansible's vars fleetctl does not honour (:func:`~fleetctl.inventory.ansible_support.not_honoured`:
    ``-e become=yes`` -> ``ansible_become``, ``-e become_user=x`` -> ``ansible_become_user``), it
    says so and what fleetctl offers instead (``fleetctl refuses Ansible's ansible_become: ... mark
    the playbook tasks that need root 'become: true' (sudo -n)``), not ``did you mean``."""
    from ..inventory.ansible_names import ANSIBLE_NAMES
    from ..inventory.ansible_support import not_honoured

    close = close_matches(name, sorted(set(ANSIBLE_NAMES) | set(candidates)), n=1, cutoff=0.6)
    if not close:
        return None
    return not_honoured(close[0]) or f"did you mean {close[0]}?"


def ignored_hint(name: str, candidates: Iterable[str]) -> str:
    """``it is ignored``, with :func:`did_you_mean`'s hint: a did-you-mean in its place, any other
    hint after it."""
    hint = did_you_mean(name, candidates)
    if hint is None:
        return "it is ignored"
    return hint if hint.startswith("did you mean ") else f"it is ignored; {hint}"


def extra_var_warnings(playbook: Any, names: Iterable[str]) -> list[str]:
    """One warning line for each extra var (``-e``) that nothing reads, naming the closest name
    that is read (difflib), e.g. ``-e arhcs: ...; did you mean archs?``.

    Read are: the names the play's templates read (guarded uses such as ``archs | default(none)``
    included) and its vars (:meth:`~fleetctl.playbook.model.Playbook.referenced_names`),
    fleetctl's own host vars (:data:`fleetctl.inventory.own_vars.OWN_VARS`: ``venv``,
    ``workdir``..., which ``-e`` sets for every host) and Ansible's names. Of fleetctl's own vars,
    those only the shipped plays' templates read (:data:`~fleetctl.inventory.own_vars.PLAY_TEMPLATE_VARS`:
    ``archs``, ``fetch_mirror``...) are read only by a play that templates them: ``-e archs=9.0a``
    to verify.yaml is named (``... reads it, nor does fleetctl; it is ignored``). Ansible's extra
    vars are free-form, so an unread one is a warning, never a refusal (a var only an inventory
    script, a template outside the play or the user's own tooling reads is left alone), except
    where a build would mislead (:func:`check_unread_build_vars`); a misspelt one (``-e
    arhcs=9.0a``, which builds for the host's own SM as if it were not given) is named.
    """
    from ..inventory.ansible_names import is_ansible_name
    from ..inventory.own_vars import OWN_VARS, PLAY_TEMPLATE_VARS, own_var_names
    from ..playbook.variables import RESERVED_NAMES

    names = list(names)
    if not names:
        return []
    own = own_var_names()
    read = playbook.referenced_names() | (own - PLAY_TEMPLATE_VARS)
    candidates = sorted((read | own) - RESERVED_NAMES)  # a hint may name a var this play does not read
    out = []
    for name in names:
        if name in read or is_ansible_name(name):
            continue
        if name in PLAY_TEMPLATE_VARS:  # fleetctl's own, read by other plays' templates: not a typo
            out.append(f"-e {name}: {Path(str(playbook.path)).name} does not read it ({name}: {OWN_VARS[name]}); "
                       "it is ignored")
            continue
        hint = ignored_hint(name, candidates)
        out.append(f"-e {name}: no task or template of {Path(str(playbook.path)).name} reads it, nor does "
                   f"fleetctl; {hint}")
    return out


def setting_var_warnings(names: Iterable[str], command: str) -> list[str]:
    """One warning line for each extra var given to a command that runs no playbook (``command``:
    ``run``, ``facts``, ``copy`` or ``fetch``) that is no host setting
    (:func:`fleetctl.inventory.extra.setting_names`): no template reads it there, so it changes
    nothing. The line has deploy's did-you-mean among the settings (:func:`did_you_mean`):
    ``-e vnev: fleetctl facts reads only host settings (...); it is ignored; did you mean venv?``.
    The CLI prints each (``fleetctl facts -e vnev=/x``); the API hands each to the fleet's
    ``on_warning`` (``Fleet(extra_vars={"vnev": "/x"}).select(...).facts()``)."""
    from ..inventory.extra import setting_names
    from ..inventory.own_vars import PLAY_TEMPLATE_VARS, own_var_names

    names = list(names)
    settings = set(setting_names(dict.fromkeys(names)))
    out = []
    for name in (n for n in names if n not in settings):
        hint = did_you_mean(name, own_var_names() - PLAY_TEMPLATE_VARS)  # deploy's suggestion, among settings
        out.append(f"-e {name}: fleetctl {command} reads only host settings (ansible_user, ansible_port, venv...), "
                   "and no template; it is ignored" + (f"; {hint}" if hint else ""))
    return out


#: Extra vars that choose what a build makes, and what the play that reads none of them builds for.
BUILD_CHOICE_VARS = {"archs": "the host's GPUs (facts), or the task's own arguments"}


def check_unread_build_vars(playbook: Any, tasks: Iterable[Any], names: Iterable[str]) -> None:
    """Refuse ``-e archs=...`` given to a play that builds (a selected task of the ``build``
    phase, ``build_wheel``) but never reads ``archs`` (nightly.yaml, sgl-kernel.yaml: their builds
    take the host's SMs from facts or ``sgl_kernel_sms``).

    Why a refusal here and a warning elsewhere (:func:`extra_var_warnings`): a play that builds
    would build and install a wheel for other archs than the command line names, and the run
    would pass: the failure story ("an arch env var was silently ignored: a
    48-minute build produced the wrong SASS"). A play that builds nothing (verify.yaml) is not
    changed by the var, so one warning line is enough there.

    Raises:
        InputError: ``PLAYBOOK: -e archs: this playbook builds (task 'NAME') but does not read archs: ...``.
    """
    from ..tasks import ACTIONS

    unread = [n for n in names if n in BUILD_CHOICE_VARS and n not in playbook.referenced_names()]
    builds = [t for t in tasks if getattr(ACTIONS.get(t.action), "phase", None) == "build"]
    if not unread or not builds:
        return
    name = unread[0]
    raise InputError(f"-e {name}: this playbook builds (task {builds[0].name!r}) but does not read {name}: it would "
                     f"build for {BUILD_CHOICE_VARS[name]}, not for the {name} given; drop -e {name}, or use a playbook "
                     "that reads it (playbooks/fp4-kernels.yaml)", file=str(playbook.path))


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


def check_become_vars(tasks: Iterable[Any], hosts: Iterable[Any]) -> None:
    """Refuse, before any host is reached, a play whose selected ``tasks`` (handlers included)
    have one that becomes (``become: true``: root through ``sudo -n``) for a host that sets
    ``ansible_become_user``/``ansible_become_method`` to anything but Ansible's default
    (:func:`fleetctl.inventory.host_checks.check_become_vars`: Ansible would run the task as that
    user, or through that method). Raises InventoryError (one line, exit 2)."""
    from ..inventory.host_checks import check_become_vars as check_host

    task = next((t for t in tasks if getattr(t, "become", False)), None)
    if task is None:
        return
    for host in hosts:
        check_host(host, task.name)
