"""Typed host settings: fleetctl's own (:class:`HostSettings`) and a connection kind's, each validated
once per host from its merged vars, with errors naming the file, line and var that set the value.

Only Ansible's names are connection settings. A host's ``ansible_connection`` (default ``ssh``;
Ansible's ``smart`` means ``ssh``) picks its kind in :data:`fleetctl.connection.registry.KINDS`, and
that kind's ``SETTINGS`` model reads the vars named by its fields' aliases, in their precedence
order: the first alias set (to anything but null) wins, wherever it was set. For SSH the legacy
``ansible_ssh_*`` names come first, as ansible-core has it (``MAGIC_VARIABLE_MAPPING`` and the ssh
plugin's option vars: a group's ``ansible_ssh_user`` beats a host's ``ansible_user``). Plain
``user``, ``port``, ``host``, ``key_file`` and ``connection`` are ordinary variables.

Before a model sees them, values are checked the way people mistype them: a boolean where a number
belongs (YAML's ``yes``), a template (``{{ ... }}``, not rendered in inventories), an empty string,
whitespace in a user or address. Paths on the controller (:data:`PATH_VARS`) expand ``~`` and
resolve against the folder of the file that set them; paths on the host (:data:`HOST_PATH_VARS`)
are spelled one way, without resolving anything (``/x//serve/`` is ``/x/serve``:
:func:`fleetctl.util.paths.tidy_path`). A ``{value: ..., secret: true}`` marker is read as its value.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from fleetctl.errors import InventoryError, InventoryErrors
from fleetctl.util.paths import tidy_path
from fleetctl.util.redact import is_marked
from fleetctl.util.settingsmodel import Setting, Settings, SettingsError, setting

from .vars import VarSource, describe
from ..util.didyoumean import close_matches

__all__ = [
    "CONTROLLER_PATH_VARS",
    "HOST_PATH_VARS",
    "HostSettings",
    "PATH_VARS",
    "SSH_EXPANDED_VARS",
    "aliases_of",
    "kind_of",
    "kind_problem",
    "shell_var_problem",
    "typed_settings",
    "validate_settings",
    "var_error",
]

PATH_VARS = frozenset({"ansible_ssh_private_key_file", "ansible_private_key_file", "known_hosts", "ssh_config"})
"""Vars holding a file on the controller that an inventory names: ``~`` expanded, relative ones
resolved against the folder of the inventory file that set them (Ansible leaves them to ssh,
relative to the current folder), by the one rule of :func:`_value_for`: ``ssh_config: ssh_config``
next to the inventory names that file from any current folder, as ``known_hosts: kh`` does."""

_NO_WHITESPACE = frozenset({"ansible_host", "ansible_ssh_host", "ansible_user", "ansible_ssh_user"})
_KIND_ALIASES = {"smart": "ssh"}



_SHELL_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")

HOST_PATH_VARS = frozenset({"venv", "cuda_home", "workdir", "deploy_lock", "venv_versions_dir"})
"""Vars holding a path on the host (fleetctl's settings and the shipped plays' ``venv_versions_dir``)."""

CONTROLLER_PATH_VARS = PATH_VARS | {"ssh_config", "fetch_mirror"}
"""Vars holding a path on the controller (:data:`PATH_VARS`, the ssh_config file, the fetch mirror)."""

SSH_EXPANDED_VARS = frozenset({"ansible_ssh_private_key_file", "ansible_private_key_file"})
"""Ansible hands these to ssh(1) as ``-o IdentityFile="..."`` (its ssh connection plugin), and ssh
expands ``${NAME}`` there from the controller's environment (ssh_config(5) "ENVIRONMENT
VARIABLES", OpenSSH 8.4): fleetctl expands a set ``${NAME}`` the same way, so an inventory that
works with Ansible works here; ``$NAME`` without braces, which ssh leaves as it is, is refused."""

_BRACED = re.compile(r"\$\{(\w+)\}")


def shell_var_problem(name: str, value: Any, home: str | None = None) -> str | None:
    """Why a path-valued var (:data:`HOST_PATH_VARS`, :data:`CONTROLLER_PATH_VARS`) holding
    ``$NAME``/``${NAME}`` is refused, or None (not such a var, or no shell variable in it).

    No shell ever reads a setting (argv travels without one; the controller opens its paths as
    written; a key file's set ``${NAME}`` is the one exception, :data:`SSH_EXPANDED_VARS`), so ``-e 'workdir=$HOME/fleetctl'`` (single quotes) or ``venv: $HOME/venv`` in a file
    would name a folder called ``$HOME``. One rule for every path var (an operator trial found
    ``workdir`` taken as ``~/$HOME/fleetctl`` while ``venv`` was refused). ``home``: the
    controller's ``$HOME`` (default ``os.environ``'s), to show the form the operator's shell would
    give."""
    on_host = name in HOST_PATH_VARS
    if not isinstance(value, str) or not (on_host or name in CONTROLLER_PATH_VARS):
        return None
    probe = _BRACED.sub(lambda m: "" if m.group(1) in os.environ else m.group(0), value) \
        if name in SSH_EXPANDED_VARS else value  # ssh's own expansion (SSH_EXPANDED_VARS)
    found = _SHELL_VAR.search(probe)
    if found is None:
        return None
    var = found.group(0)
    is_home = (found.group(1) or found.group(2)) == "HOME"
    home = (home if home is not None else os.environ.get("HOME")) if is_home else None
    expanded = f" gives {value.replace(var, home, 1)}" if home else " expands it"
    example = value.replace(var, "/home/USER" if is_home else "/FULL/PATH", 1)
    where, caveat = ("on the host", "; right only when the host's path is the same as here") if on_host else \
        ("on the controller", "")
    return (f"{value!r} holds {var}, an unexpanded shell variable: fleetctl does not expand shell variables (the "
            f"path is used as it is, {where}): write the path in full (e.g. {example}), or let your shell expand "
            f"it (-e with double quotes, not single:{expanded}{caveat})")


def _absolute_host_path(value: Any) -> Any:
    """Refuse a host path that is not absolute: ``venv`` and ``cuda_home`` are used as program
    paths on the host (``<venv>/bin/python3``, ``<cuda_home>/bin/nvcc``), with no shell to expand
    ``~`` and from whatever folder a command runs in, so ``~/venv`` would name a folder called ``~``
    and ``venv`` a folder under the current one (new-user trials: ``--plan`` said ``~/venv/bin/python3
    does not exist``, and ``venv: venv`` gave facts of no Python at all, with no warning). Ansible
    takes a relative remote path against the login folder; fleetctl does that only for ``~/x`` in
    ``workdir`` (a bare ``x`` is refused, :func:`_workdir_path`) and for ``deploy_lock``, which it
    resolves itself (:func:`fleetctl.facts.gather.remote_workdir`), and asks for these two in full
    rather than guess a folder. (A shell
    variable in any path var is refused before, by :func:`shell_var_problem`.)"""
    if isinstance(value, str) and value.startswith("~"):
        raise ValueError(f"{value!r} starts with ~, which no shell expands here: this path is used as it is "
                         "on the host; write it in full (e.g. /home/USER/venv)")
    return _not_relative(value, "/home/USER/venv")


def _not_relative(value: Any, example: str, home_form: str = "") -> Any:
    """The one relative-path refusal of host path vars (``venv``, ``cuda_home``, ``workdir``);
    ``home_form``: the home-relative spelling the var accepts instead, said in the fix."""
    if isinstance(value, str) and value and not value.startswith("/"):
        also = f", or {home_form} for a folder in the login user's home" if home_form else ""
        raise ValueError(f"{value!r} is a relative path, which the host would take against whatever folder a "
                         f"command runs in: write it absolute (e.g. {example}){also}")
    return value


def _workdir_path(value: Any) -> Any:
    """Refuse a relative ``workdir`` other than ``~`` and ``~/x``: the run folder took ``x`` under
    the login home while a play's ``{{ workdir }}`` (``-e workdir=x``) and the build preflight's
    space probe took it against ``/`` (operator trial: ``-e workdir=fleetwd`` made
    ``~/fleetwd`` on the host, then failed ``cannot write 2048 MiB in / (for fleetwd/wheels)``).
    ``~`` and ``~/x`` say the home folder explicitly and stay (:func:`fleetctl.facts.gather.
    remote_workdir` resolves them; the default is ``~/.fleetctl/<host>``). Same rule and words
    as ``venv``'s, :func:`_absolute_host_path`."""
    if isinstance(value, str) and (value == "~" or value.startswith("~/")):
        return value
    name = posixpath.normpath(value).lstrip("./") if isinstance(value, str) and value else ""
    name = name or "fleetctl"
    return _not_relative(value, f"/home/USER/{name}", f"~/{name}")

class HostSettings(Settings):
    """fleetctl's own host vars, typed. ``None``: not said (fleetctl's default applies).

    Attributes:
        venv: the Python environment builds and installs use, on the host (its ``bin/python3``;
            absolute: a relative path or ``~`` is refused at load).
        cuda_home: the CUDA toolkit folder on the host (absolute), or None to detect it.
        workdir: the working folder on the host (absolute, or ``~/x`` in the login home; another
            relative path is refused at load), or None for ``~/.fleetctl/<host>``.
        known_hosts: a known_hosts file on the controller (absolute; ``~`` expanded, relative to
            the inventory file's folder), or None for OpenSSH's ``~/.ssh/known_hosts``.
        fallback_archs: the arch list built when the host has no NVIDIA driver (``"9.0a;12.0a"``);
            a host whose driver is installed but broken fails instead.
        build_host: the inventory host that builds for this host's arch class, or None to pick one.
        max_jobs: parallel compile jobs, or None to derive them from cores and memory.
        keepalive_interval_s: seconds between SSH keepalives (var ``keepalive_interval``); three
            unanswered ones declare the connection dead. Also the interval of the heartbeats the
            host's commands read: four missed ones stop them there (fleetctl/connection/lifeline.py).
        deploy_lock: the deploy lock file on the host (default ``<workdir>/deploy.lock``); one path
            for every inventory that names the machine differently.
        gpu_probe_timeout_s: seconds nvidia-smi may take in facts (var ``gpu_probe_timeout_s``,
            default 30): a GPU that has fallen off the bus blocks it in the kernel for good.
        verify_device: where ``verify`` must work when its task does not say: ``auto`` (the GPU when
            the host's facts list GPUs), ``cuda`` or ``cpu`` (hosts whose GPUs are not for torch).
            ``cuda`` also says the host has GPUs, and ``cpu`` opts out of the check that a host
            Slurm's GRES gives GPUs has a driver (:func:`fleetctl.build.gpustack.check_gpu_stack`).
        keep_runs, keep_days: how many of fleetctl's per-run folders a deploy keeps on the host,
            and for how many days (:mod:`fleetctl.util.retention`), or None for the controller's
            ``FLEETCTL_KEEP_RUNS``/``FLEETCTL_KEEP_DAYS`` (50, 30).
    """

    venv: str | None = setting(str, "venv", optional=True, before=_absolute_host_path)
    cuda_home: str | None = setting(str, "cuda_home", optional=True, before=_absolute_host_path)
    workdir: str | None = setting(str, "workdir", optional=True, before=_workdir_path)
    known_hosts: str | None = setting(str, "known_hosts", optional=True)
    fallback_archs: str = setting(str, "fallback_archs", default="9.0a;12.0a")
    build_host: str | None = setting(str, "build_host", optional=True)
    max_jobs: int | None = setting(int, "max_jobs", optional=True, ge=1)
    keepalive_interval_s: float = setting(float, "keepalive_interval", default=15.0, gt=0)
    deploy_lock: str | None = setting(str, "deploy_lock", optional=True)
    verify_device: Literal["auto", "cuda", "cpu"] = setting("literal", "verify_device", default="auto",
                                                            choices=("auto", "cuda", "cpu"))
    gpu_probe_timeout_s: float = setting(float, "gpu_probe_timeout_s", default=30.0, gt=0, le=3600)
    keep_runs: int | None = setting(int, "keep_runs", optional=True, ge=1)
    keep_days: float | None = setting(float, "keep_days", optional=True, gt=0, allow_inf_nan=False)


@functools.lru_cache(maxsize=None)
def aliases_of(model: type[Settings]) -> Mapping[str, str]:
    """Var name -> field name, for every var a settings model reads, in precedence order (read-only)."""
    out: dict[str, str] = {}
    for fname, info in model.model_fields.items():
        for name in info.aliases or (fname,):
            out.setdefault(name, fname)
    return MappingProxyType(out)


def kind_of(value: Any, kinds: Mapping[str, str]) -> str | None:
    """The registered kind an ``ansible_connection`` value names (None: not said means ``ssh``)."""
    if value is None:
        return "ssh"
    if not isinstance(value, str):
        return None
    value = _KIND_ALIASES.get(value, value)
    return value if value in kinds else None


def kind_problem(value: Any, kinds: Mapping[str, str]) -> str:
    """Why an ``ansible_connection`` value names no registered kind, with a did-you-mean."""
    known = ", ".join(sorted(kinds))
    if not isinstance(value, str):
        return f"ansible_connection must be a connection name ({known}), not {describe(value)}"
    close = close_matches(value, list(kinds), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"connection {value!r} is not one fleetctl has ({known}){hint}"


def _expectation(info: Setting) -> str:
    """What a field accepts, from its kind and bounds, as a refusal says it after ``must be``:
    ``an integer from 1 to 65535``, ``true or false`` (a bool), ``one of auto, cuda, cpu`` (a
    ``Literal``: its choices, in declared order), ``a string or a list of strings`` (``"words"``)."""
    if info.kind is bool:
        return "true or false"
    if info.kind == "literal":
        return "one of " + ", ".join(str(c) for c in info.choices)
    if info.kind == "words":
        return "a string or a list of strings"
    kind = "an integer" if info.kind is int else "a number" if info.kind is float else "a string"
    bounds = info.bounds
    if "ge" in bounds and "le" in bounds:
        return f"{kind} from {bounds['ge']:g} to {bounds['le']:g}"
    if "ge" in bounds:
        return f"{kind} of at least {bounds['ge']:g}"
    if "gt" in bounds:
        return f"{kind} greater than {bounds['gt']:g}"
    return kind


def _value_for(name: str, value: Any, src: VarSource | None) -> Any:
    if is_marked(value):
        value = value["value"]
    if name in SSH_EXPANDED_VARS and isinstance(value, str):  # as ssh(1) expands IdentityFile
        value = _BRACED.sub(lambda m: os.environ.get(m.group(1), m.group(0)), value)
    if name in HOST_PATH_VARS and isinstance(value, str) and value.strip() and "{{" not in value:
        value = tidy_path(value)  # one spelling for plan, dry run and deploy (trial: ``venv=.../serve/``)
    if name in PATH_VARS and isinstance(value, str) and value.strip() and "{{" not in value:
        base = src.base_dir if src is not None and src.base_dir else os.getcwd()
        value = os.path.normpath(os.path.join(base, os.path.expanduser(value)))
    return value


def var_error(message: str, src: VarSource | None, name: str, host: str) -> InventoryError:
    """The one-line error about var ``name``'s value, naming where the value came from: an extra
    var as typed (``-e fallback_archs: MESSAGE``: level ``"extra"``, :mod:`fleetctl.inventory.extra`),
    else the file, line and key that set it (``inventory.yaml:7: all.hosts.n1.venv: MESSAGE``), or,
    with no source recorded, the host (``host 'n1': venv: MESSAGE``)."""
    if src is None:
        return InventoryError(f"host {host!r}: {name}: {message}")
    if src.level == "extra":  # set by -e, not by any file: named as typed (extra.EXTRA_FILE)
        return InventoryError(message, key=f"-e {src.key}")
    return InventoryError(message, file=src.file, line=src.line, key=src.key)


def validate_settings(model: type[Settings], variables: Mapping[str, Any], sources: Mapping[str, VarSource],
                      *, host: str, what: str) -> Settings:
    """``model`` validated from a host's merged vars.

    Args:
        model: a settings model (:class:`HostSettings`, or a connection kind's ``SETTINGS``).
        variables: the host's merged vars; only the model's aliases are read, null means not said.
        sources: var name -> where its value was set (for the error and for resolving paths).
        host: the host name, for errors about values with no recorded source.
        what: ``"connection settings"`` or ``"fleetctl's host settings"``, for messages (``templated
            values ('{{ ... }}') are not supported in fleetctl's host settings: ...``).

    Raises:
        InventoryError: one line ``FILE:LINE: KEY: must be ..., not ...`` at the var that set a
            wrong value; :class:`~fleetctl.errors.InventoryErrors` (a line each) when several are.
    """
    aliases = aliases_of(model)
    data: dict[str, Any] = {}
    taken: set[str] = set()
    problems: list[InventoryError] = []
    for name, fname in aliases.items():
        value = variables.get(name)
        if value is None or fname in taken:
            continue
        taken.add(fname)
        src = sources.get(name)
        value = _value_for(name, value, src)
        problem = _form_problem(name, value, model.model_fields[fname], what)
        if problem:
            problems.append(var_error(problem, src, name, host))
        else:
            data[name] = value
    try:
        settings = model.model_validate(data)
    except SettingsError as exc:
        problems.extend(_refusal(model, aliases, e, variables, sources, host) for e in exc.errors())
    error = InventoryErrors.of(problems)
    if error is not None:
        raise error
    return settings


def _form_problem(name: str, value: Any, info: Setting, what: str) -> str | None:
    """What is wrong with a value's form before its model sees it (a boolean for a number, which
    pydantic's lax mode would take as 1 or 0; a template, an empty string, whitespace in a user or
    address), or None."""
    if isinstance(value, bool) and info.kind in (int, float):
        return f"must be {_expectation(info)}, not {describe(value)}"
    if isinstance(value, str):
        if "{{" in value or "{%" in value:
            return (f"templated values ('{{{{ ... }}}}') are not supported in {what}: they are read as written, "
                    "before any template is rendered; write the value itself")
        if not value.strip():
            return "must not be empty"
        if name in _NO_WHITESPACE and any(c.isspace() for c in value):
            return f"must not contain whitespace, got {value!r}"
    return None


def _refusal(model: type[Settings], aliases: Mapping[str, str], err: Mapping[str, Any], variables: Mapping[str, Any],
             sources: Mapping[str, VarSource], host: str) -> InventoryError:
    """One error of the model's (:meth:`SettingsError.errors`) as the line naming its var."""
    name = str(err["loc"][0]) if err["loc"] else "?"
    info = model.model_fields.get(aliases.get(name, name))
    if str(err["msg"]).startswith("Value error, "):  # a field's own check says what is wrong
        return var_error(str(err["msg"])[len("Value error, "):], sources.get(name), name, host)
    expected = _expectation(info) if info is not None else str(err["msg"]).lower()
    return var_error(f"must be {expected}, not {describe(variables.get(name))}", sources.get(name), name, host)


def typed_settings(host: str, variables: Mapping[str, Any], sources: Mapping[str, VarSource]
                   ) -> tuple[HostSettings, str, Settings | None, InventoryError | None]:
    """A host's typed settings from its merged vars.

    Returns:
        ``(settings, kind, connection_settings, problem)``: fleetctl's own settings; the
        connection kind's name (as written when unknown); the kind's ``SETTINGS`` instance, or None
        with ``problem`` saying why when ``ansible_connection`` names no registered kind (raised
        only if the host is used: an inventory may hold hosts for tools other than fleetctl).

    Raises:
        InventoryError: a value of the wrong type or form, at the var that set it;
            :class:`~fleetctl.errors.InventoryErrors` for each such value of both models.
    """
    from fleetctl.connection.registry import KINDS, load_kind

    refused = _shell_var_problems(host, variables, sources)
    problems: list[InventoryError] = list(refused.values())
    if refused:  # the models would only repeat them (as "a relative path"); their other problems still show
        variables = {k: v for k, v in variables.items() if k not in refused}
    settings: Any = None
    try:
        settings = validate_settings(HostSettings, variables, sources, host=host, what="fleetctl's host settings")
    except InventoryError as exc:
        problems.append(exc)
    raw = variables.get("ansible_connection")
    kind = kind_of(raw, KINDS)
    conn = None
    if kind is not None:
        try:
            conn = validate_settings(load_kind(kind).settings_model, variables, sources, host=host,
                                     what="connection settings")
        except InventoryError as exc:
            problems.append(exc)
    error = InventoryErrors.of(problems)
    if error is not None:
        raise error
    if kind is None:
        src = sources.get("ansible_connection")
        return settings, str(raw), None, var_error(kind_problem(raw, KINDS), src, "ansible_connection", host)
    return settings, kind, conn, None


def _shell_var_problems(host: str, variables: Mapping[str, Any], sources: Mapping[str, VarSource]
                        ) -> dict[str, InventoryError]:
    """Var name -> :func:`shell_var_problem` as the line naming where it was set, for each path var
    of the host's that holds a shell variable."""
    out: dict[str, InventoryError] = {}
    for name in sorted(HOST_PATH_VARS | CONTROLLER_PATH_VARS):
        value = variables.get(name)
        problem = shell_var_problem(name, value["value"] if is_marked(value) else value)
        if problem:
            out[name] = var_error(problem, sources.get(name), name, host)
    return out
