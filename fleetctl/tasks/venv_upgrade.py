"""``venv_upgrade``: install or upgrade packages (torch, flashinfer nightlies) in the venv the
play's tasks use, then re-read its python facts so that the tasks after it build against what is
there now (the torch a build compiles against, its CUDA build, the build key).

After a ``venv_stage`` the venv is the staged version, so the live one is never touched. What every
other distribution did (added, changed, removed) is reported. The tool is pip where the venv has
it (pip unlinks a file before writing its replacement, so a staged version's hard links to the live
venv are never written through), else uv (``uv pip install --python``).
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import Field, field_validator

from ..connection.base import CommandResult
from ..status import Status
from .argtypes import ActionArgs, argv_list
from .base import Action, HostView, Plan, TaskResult
from .causes import install_cause
from .build_preflight import CLEAN_PYTHON_ENV
from .venv_probe import PIP_INSTALL_ENV
from .envs import STAGED_FACT, staged_environment, venv_facts
from .venv_state import STATE_SCRIPT, dist_changes, parse_state, state_failure
from .steps import Run, probe
from .pytool import index_tool, pick_tool
from .venv_modes import in_venv_modes
from ..util.torchname import torch_label


class VenvUpgradeArgs(ActionArgs):
    """``venv_upgrade``: ``pip install`` requirements into the play's venv.

    Attributes:
        packages: requirement specifiers (``torch``, ``"torch==2.12.0.dev20261128+cu130"``).
        pre: allow pre-releases (nightlies): pip's ``--pre``, uv's ``--prerelease allow``.
        upgrade: ``--upgrade`` (the newest allowed, not what is installed).
        no_deps: ``--no-deps``.
        pip_args: where packages come from, passed as given (``[--index-url, URL]``,
            ``[--no-index, --find-links, DIR]``).
        tool: ``auto`` (pip where the venv has it, else uv), ``pip`` or ``uv``.
    """

    packages: list[str] = Field(min_length=1)
    pre: bool = False
    upgrade: bool = True
    no_deps: bool = False
    pip_args: list[str] = Field(default_factory=list)
    tool: Literal["auto", "pip", "uv"] = "auto"

    @field_validator("packages", "pip_args", mode="before")
    @classmethod
    def _lists(cls, v: object, info) -> object:
        return argv_list(v, info.field_name)


def install_argv(tool: str, python: str, uv: str | None, args: VenvUpgradeArgs) -> list[str]:
    """The install command (pure)."""
    if tool == "uv":
        argv = [uv or "uv", "pip", "install", "--python", python]
        if args.pre:
            argv += ["--prerelease", "allow"]
    else:
        argv = [python, "-m", "pip", "install", "--no-input"]
        if args.pre:
            argv.append("--pre")
    if args.upgrade:
        argv.append("--upgrade")
    if args.no_deps:
        argv.append("--no-deps")
    return [*argv, *args.pip_args, *args.packages]


def _names(packages: list[str]) -> list[str]:
    return [re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[@(]", p, maxsplit=1)[0]).lower() for p in packages]


def plan(args: VenvUpgradeArgs, host: HostView) -> Plan:
    """What the venv holds, the install, what it holds after, its facts; CHANGED when a version moved."""
    if not host.venv:
        return TaskResult(Status.FAILED, msg="no venv for this host: set the host var 'venv'")
    state_argv = (host.python, "-c", STATE_SCRIPT, "torch", "/nonexistent", "")
    before = parse_state((yield probe(state_argv, f"what {host.venv} holds now", timeout_s=300,
                                      env=CLEAN_PYTHON_ENV, cwd="/")))
    if before.get("error"):
        return TaskResult(Status.FAILED, msg=state_failure(before, host.python, "before the upgrade"))
    uv = (host.facts.get("uv") or {}).get("path")
    has_pip = "pip" in (before.get("dists") or {})
    held = {"python": {"packages": {"pip": "" if has_pip else None}}}  # what the venv holds, probed just now
    tool = args.tool if args.tool != "auto" else index_tool("auto", "uv" if uv else "pip", held)  # pip reads pip.conf
    if tool == "uv" and not uv:
        return TaskResult(Status.FAILED, msg="tool: uv, but the host has no uv (facts: uv.path)")
    if tool == "pip" and not has_pip:  # a venv made by uv venv or --without-pip
        problem = pick_tool(args.tool, {"python": {"packages": {"pip": None}}, "uv": host.facts.get("uv")},
                            host.venv, host.python)[2]
        return TaskResult(Status.FAILED, msg=problem or f"the venv {host.venv} has no pip")
    env = {**PIP_INSTALL_ENV, "TMPDIR": host.run_dir}
    names = _names(args.packages)
    res = yield Run(argv=tuple(in_venv_modes(host.python, install_argv(tool, host.python, uv, args))), env=env, cwd="/",
                    reason=f"{'upgrade' if args.upgrade else 'install'} {', '.join(args.packages)} in {host.venv}")
    if res.rc != 0:
        why = yield from install_cause(res, host, f"{host.venv} or the TMPDIR {host.run_dir}")
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"{tool} install {' '.join(args.packages)}: {why}",
                          data={"decision": {"action": "upgrade", "packages": names}})
    after = parse_state((yield Run(argv=state_argv, mutating=False, after_change=True, quiet=True, timeout_s=300,
                                   env=CLEAN_PYTHON_ENV, cwd="/", reason="what the install changed",
                                   assume=CommandResult(argv=[], rc=0, stdout=json.dumps({**before, "simulated": True}).encode()))))
    changes = dist_changes(before.get("dists") or {}, after.get("dists") or {}, "")
    facts, err = yield from venv_facts(host, host.venv, {k: host.facts[k] for k in ("python", "cmake", "ninja")
                                                         if k in host.facts})
    if err:
        return TaskResult(Status.FAILED, msg=err)
    torch_moved = (before.get("torch"), before.get("cuda")) != (after.get("torch"), after.get("cuda"))
    moved = [f"{torch_label(before.get('torch'), before.get('cuda'))} -> "
             f"{torch_label(after.get('torch'), after.get('cuda')).removeprefix('torch ')}"] if torch_moved else []
    others = [c for c in changes if not c.startswith(("torch ", "added torch ", "removed torch "))]
    data = {"tool": tool, "changes": changes, "decision": {"action": "upgrade", "packages": names},
            "torch_before": {"torch": before.get("torch"), "cuda": before.get("cuda")},
            "torch_after": {"torch": after.get("torch"), "cuda": after.get("cuda")}}
    environment = None
    staged = host.facts.get(STAGED_FACT) or {}
    if staged and not staged.get("simulated"):
        environment = staged_environment(staged.get("live_env") or {}, staged, facts)
    if after.get("simulated"):
        if "torch" in names and isinstance(facts.get("python"), dict):
            # planned only: torch is not there yet, but this task would install it (verify's
            # torch preflight, fleetctl.tasks.runtime_preflight, must not refuse the venv for it)
            facts = {**facts, "python": {**facts["python"], "torch_pending": ", ".join(args.packages)}}
        return TaskResult(Status.CHANGED, data=data, facts=facts, msg=f"would upgrade {', '.join(names)}")
    if not changes and not torch_moved:
        return TaskResult(Status.OK, data=data, facts=facts, environment=environment,
                          msg=f"{', '.join(names)}: already the newest allowed in {host.venv}")
    text = "; ".join(moved + others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
    return TaskResult(Status.CHANGED, data=data, facts=facts, environment=environment, msg=f"{text} ({tool})")


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`upgrade` and the packages it names."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Update torch to the nightly
  venv_upgrade:
    packages: [torch]
    pre: true
    pip_args: [--index-url, "https://download.pytorch.org/whl/nightly/cu130"]
  timeout: 3600
"""

ACTION = Action(name="venv_upgrade", args=VenvUpgradeArgs, phase="install", timeout_s=3600.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
