"""The pure parts shared by the staged-environment actions (``venv_stage``, ``venv_upgrade``,
``venv_switch``): where a venv's versions live, the host script's steps and answers, and how the
python facts of another venv are read (see ``docs/staged.md`` for the layout on the host).

The host side is ``playbooks/scripts/venv_envs.py`` (stdlib only); these helpers only build its
command lines and read its one JSON line.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from ..connection.base import CommandResult
from ..facts.scripts import script_path
from .base import HostView, Plan, first_error_line
from .build_preflight import CLEAN_PYTHON_ENV
from .steps import Put, Run, probe

#: The host script (``playbooks/scripts/``).
ENVS_SCRIPT = "venv_envs.py"
#: The facts script, run again for the venv a stage made or an upgrade changed.
FACTS_SCRIPT = "facts.py"
#: The facts keys that describe the venv (re-read for a staged or upgraded venv).
VENV_FACT_KEYS = ("python", "cmake", "ninja")
#: The facts key a ``venv_stage`` leaves for the tasks after it: ``{version, path, live,
#: live_version, versions_dir}`` of the version it staged (``venv_switch`` reads it).
STAGED_FACT = "staged_env"


def versions_dir(venv: str) -> str:
    """The default versions folder of ``venv``: ``.<name>-versions`` beside it, in its parent
    (``/opt/venvs/serve`` -> ``/opt/venvs/.serve-versions``).

    Why beside the venv and not under the login user's ``<workdir>`` (``~/.fleetctl/<host>``,
    0700): after the switch the venv path is a symlink into this folder, so everyone who runs the
    venv (a serving account, a colleague) must be able to reach it. Beside the venv it is in the
    same permission domain as the venv was: the host script makes it with the parent's group and
    other read/search bits (``playbooks/scripts/venv_envs.py``), and it is on the venv's file
    system (hard links and the adoption rename need that) in every ordinary layout. It is not
    scratch either: operators clear ``~/.fleetctl`` as a cache, which would delete production.
    Switching already needs the parent writable (the symlink is renamed over the venv path), so
    making a folder there needs no right the switch does not. Installs whose versions already live
    elsewhere (the old default ``<workdir>/envs/<name>-<hash>``) keep them there: once the venv is a
    symlink, the folder it points into is used (stage, switch and rollback alike)."""
    path = posixpath.normpath(venv)
    name = posixpath.basename(path) or "venv"
    return posixpath.join(posixpath.dirname(path), f".{name}-versions")


def installed_dir(workdir: str) -> str:
    """The folder of ``pip_install``'s install records and kept wheels, one sub-folder per venv
    (``<key>/<dist>.json``: venv, sha256, kept wheel, previous; :data:`.venv_state.RECORD_LAYOUT`)."""
    return posixpath.join(workdir, "installed")


def upload(host: HostView) -> Plan:
    """Upload the host script into the run's folder (read-only for the host, so in a dry run too);
    returns its remote path, or an error message (``str`` starting with ``"!"``)."""
    remote = host.remote_script(ENVS_SCRIPT)
    # into the run's own folder, as the facts script: a dry run needs it for its read-only status
    err = yield Put(local=str(script_path(ENVS_SCRIPT)), remote=remote, mode=0o600, mutating=False,
                    reason="the staged-environment script travels as a file")
    if err is not None:
        return f"!{err}"
    return remote


def script_argv(remote: str, command: str, *args: str) -> tuple[str, ...]:
    """``python3 venv_envs.py COMMAND ARGS...`` (the host's own python3, as the facts script)."""
    return ("python3", remote, command, *args)


def status_probe(remote: str, venv: str, versions: str, workdir: str, to: str = "") -> Run:
    """The read-only ``status`` of ``venv`` (see the host script); with ``to`` (``previous`` or a
    version number), also the version a ``switch --to TO`` would make live and why it could not
    (``to_version``, ``to_error``: the host script's own check, so a plan refuses what the switch would)."""
    return probe(script_argv(remote, "status", "--venv", venv, "--versions", versions,
                             "--installed", installed_dir(workdir), *(("--to", to) if to else ())),
                 f"what {venv} is: a real folder, a staged environment, its versions", env=CLEAN_PYTHON_ENV, cwd="/")


def answer(res: CommandResult) -> dict[str, Any]:
    """The script's JSON line, or ``{"ok": False, "error": ...}`` naming why there is none."""
    for line in reversed(res.stdout_text.strip().splitlines()):
        if line.startswith("{"):
            try:
                out = json.loads(line)
            except ValueError:
                continue
            if isinstance(out, dict):
                return out
    return {"ok": False, "error": f"{ENVS_SCRIPT} did not answer (rc={res.rc}): {first_error_line(res)}"}


def simulated(data: Mapping[str, Any]) -> CommandResult:
    """What a dry run answers a simulated script command with."""
    return CommandResult(argv=[], rc=0, stdout=(json.dumps({"ok": True, **data}) + "\n").encode())


def moved_facts(facts: Mapping[str, Any], old: tuple[str, ...], new: str) -> dict[str, Any]:
    """The venv facts (:data:`VENV_FACT_KEYS`) with every path under one of ``old`` moved under
    ``new``: the facts of an exact copy of the venv (what a dry run assumes of a stage)."""
    def move(value: Any) -> Any:
        if isinstance(value, str):
            for prefix in old:
                if prefix and (value == prefix or value.startswith(prefix.rstrip("/") + "/")):
                    return new + value[len(prefix.rstrip("/")):]
            return value
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        return value

    return {k: move(facts[k]) for k in VENV_FACT_KEYS if k in facts}


def venv_facts(host: HostView, venv: str, assume: Mapping[str, Any]) -> Plan:
    """Read the venv facts of ``venv`` with the facts script (uploaded again: one file), after the
    task changed it; returns ``(facts, error)``. A dry run answers ``assume``."""
    from ..facts.gather import facts_argv

    remote = host.remote_script(FACTS_SCRIPT)
    err = yield Put(local=str(script_path(FACTS_SCRIPT)), remote=remote, mode=0o600, reason="the facts script")
    if err is not None:
        return {}, f"cannot upload the facts script: {err}"
    res = yield Run(argv=tuple(facts_argv("python3", remote, workdir=host.run_dir, venv=venv,
                                          cuda_home=host.cuda_home)),
                    mutating=False, after_change=True, quiet=True, timeout_s=300, cwd="/",
                    reason=f"the facts of {venv} (python, torch, its CUDA build) for the tasks after this one",
                    assume=CommandResult(argv=[], rc=0, stdout=(json.dumps(dict(assume)) + "\n").encode()))
    for line in reversed(res.stdout_text.strip().splitlines()):
        if line.startswith("{"):
            try:
                got = json.loads(line)
            except ValueError:
                continue
            return {k: got[k] for k in VENV_FACT_KEYS if k in got}, None
    return {}, f"the facts script printed nothing for {venv}: {first_error_line(res)}"


def live_env(status: Mapping[str, Any]) -> dict[str, Any]:
    """The live environment as the ``status`` answer describes it (for the run record)."""
    env = dict(status.get("environment") or {})
    env["path"] = status.get("live")
    env["target"] = status.get("target")
    return env


def staged_environment(live: Mapping[str, Any], staged: Mapping[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    """The run record's ``environment`` while a version is staged: the live one as it is, and the
    staged one (``version``, ``path``, the torch its facts report)."""
    py = facts.get("python") or {}
    disk = {k: staged[k] for k in ("size_mib", "copied_mib") if staged.get(k) is not None}
    return {"state": "staged", "live": dict(live),
            "staged": {"version": staged.get("version"), "path": staged.get("path"), "torch": py.get("torch"),
                       "torch_cuda": py.get("torch_cuda"), **disk}}


def kept_line(environment: Mapping[str, Any]) -> str:
    """The one line a run whose staged version failed tells: where that version is and what it
    holds (MiB, as measured by the stage: ``size_mib`` all its files, ``copied_mib`` the bytes the
    stage copied rather than hard-linked). It is kept on purpose, for the post-mortem of what failed
    in it (the new torch a nightly installed, the build's environment), and the next stage removes
    it (docs/staged.md, "Kept"); most of it is hard links to the live venv's files, which ``du`` of
    the version alone counts as its own."""
    staged = environment.get("staged") or {}
    held = ""
    if staged.get("size_mib") is not None:
        copied = staged.get("copied_mib") or 0
        held = (f", {staged['size_mib']} MiB when staged, {copied} MiB of it copied, the rest hard links to the "
                "live venv's files")
    return (f"staged v{staged.get('version')} kept for inspection at {staged.get('path')}{held}; the live venv is "
            "untouched, the next stage removes it")


def controller_problem(host: HostView, path: str | None, shown: str | None = None) -> str | None:
    """Why ``path`` (the venv, or the folder it resolves to) must not be staged or switched: it is
    the environment this fleetctl runs from (:attr:`HostView.controller_env`, local hosts only),
    so moving it would pull the running controller's own files from under it; ``None`` otherwise."""
    if not path or not host.controller_env or posixpath.normpath(path) not in host.controller_env:
        return None
    shown = shown or host.venv
    where = "" if posixpath.normpath(str(shown)) == host.controller_env[0] else f" ({host.controller_env[0]})"
    return (f"venv {shown} is the environment this fleetctl runs from{where}: "
            f"staging it would move the controller's own venv; give host {host.name} a venv of its own "
            f"(the host var venv) or deploy it without --staged")
