"""``venv_switch``: make a version of the host's venv the live one, record it, keep the last few.

After a ``venv_stage`` (``to: staged``, the default) it switches to the version this run staged,
built into and verified: only reached when every task before it passed, so a failure at any
stage leaves the live environment as it was. ``fleetctl rollback`` runs it with ``to: previous``
or a version number. The inventory's ``venv`` becomes (or stays) a symlink to ``<versions>/vN``,
replaced atomically by renaming a new symlink over it; on first use the real venv folder is moved
into the versions folder as version 1 (not copied). Versions beyond ``keep`` are removed, the live
one and the one live until the switch always kept, the others by when they were live. A rollback's
target is checked while planning by the host script's own check (``status --to``): a pruned or
moved-away version is refused in ``--plan`` and ``--dry-run`` as by the switch. The switch, the environment's contents (torch, its CUDA build, the kernels'
sha256) and since when it is live go into the run record (the host's ``environment``).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from ..status import Status
from .argtypes import ActionArgs, is_template
from .base import Action, HostView, Plan, TaskResult
from .build_preflight import CLEAN_PYTHON_ENV
from .envs import (STAGED_FACT, answer, controller_problem, installed_dir, live_env, script_argv, simulated, status_probe,
                   upload, versions_dir)
from .steps import Run


class VenvSwitchArgs(ActionArgs):
    """``venv_switch``: switch the live venv to another version.

    Attributes:
        to: ``staged`` (the version ``venv_stage`` made in this run), ``previous`` (the one live
            before the current one), or a version number of 1 or more (``3`` or ``v3``).
        keep: versions kept after the switch, the live one included; the one live until the switch
            (the rollback target) is always kept too, then the most recently live others (never
            ranked by number; docs/staged.md, "Kept"); the rest are removed.
        why: recorded in the switch history (``deploy``, ``rollback``...).
    """

    to: str = "staged"
    keep: int = Field(default=3, ge=1)
    why: str = "deploy"

    @field_validator("to", mode="before")
    @classmethod
    def _to(cls, v: object) -> object:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if isinstance(v, str) and not is_template(v) and not re.fullmatch(r"staged|previous|v?0*[1-9][0-9]*", v.strip()):
            raise ValueError(f"to must be staged, previous or a version number of 1 or more, got {v!r}")
        return v.strip() if isinstance(v, str) else v


def plan(args: VenvSwitchArgs, host: HostView) -> Plan:
    """Status, the switch (atomic), prune; CHANGED naming both versions, OK when already live."""
    if not host.venv:
        return TaskResult(Status.FAILED, msg="no venv for this host: set the host var 'venv'")
    to = args.to
    own = controller_problem(host, host.venv)
    if own:
        return TaskResult(Status.FAILED, msg=f"preflight: {own.replace('staging', 'switching')}",
                          data={"decision": {"action": "fail"}})
    staged = host.facts.get(STAGED_FACT) or {}
    if to == "staged" and not staged:
        return TaskResult(Status.FAILED, data={"decision": {"action": "fail"}},
                          msg=f"nothing staged: {host.venv} is the live venv (a venv_stage task must run before "
                              "venv_switch in the same play)")
    if to == "staged" and staged.get("kept"):
        # the stage kept the live venv: nothing after it changed the host (venv_stage.keep)
        return TaskResult(Status.OK, msg=staged.get("msg") or "nothing to change: the live venv stays live",
                          facts={STAGED_FACT: None},
                          data={"decision": {"action": "skip", "why": "nothing to change",
                                             "version": staged.get("live_version")}})
    remote = yield from upload(host)
    if remote.startswith("!"):
        return TaskResult(Status.FAILED, msg=f"venv_switch: {remote[1:]}")
    if to == "staged":
        st = {"live": staged.get("live"), "live_version": staged.get("live_version")}
        path, target = staged.get("path"), staged.get("version")
    else:
        st = answer((yield status_probe(remote, host.venv, versions_dir(host.venv), host.workdir, to)))
        if not st.get("ok"):
            return TaskResult(Status.FAILED, msg=f"venv_switch: {st.get('error')}")
        if not st.get("versions"):
            return TaskResult(Status.FAILED, data={"decision": {"action": "fail"}},
                              msg=f"{host.venv} has no staged environments to switch between (deploy with --staged "
                                  "first)")
        # the version "previous" picks is named in --plan and --dry-run, not the word; a version
        # the switch would refuse (pruned, its folder gone, never finished) is refused here, by the
        # host script's own check (status --to), so --plan, --dry-run and the rollback agree
        path, target = host.venv, st.get("to_version")
        if st.get("to_error"):
            return TaskResult(Status.FAILED, msg=f"switch: {st['to_error']}", data={
                "decision": {"action": "fail", "from": st.get("live_version"), "to": target or to},
                "live": live_env(st)})
    current = st.get("live_version")
    decision = {"action": "switch", "from": current if current is not None else "live folder", "to": target or to,
                "keep": args.keep}
    argv = ["--venv", path, "--to", to, "--keep", str(args.keep), "--why", args.why,
            "--run-id", host.run_dir.rstrip("/").rsplit("/", 1)[-1], "--installed", installed_dir(host.workdir)]
    res = yield Run(argv=script_argv(remote, "switch", *argv), env=CLEAN_PYTHON_ENV, cwd="/", quiet=True,
                    reason=f"make {'the staged version' if to == 'staged' else to} live: a new symlink renamed over "
                           f"{st.get('live')}; keep the last {args.keep}",
                    assume=simulated({"changed": True, "from": current, "to": target or to, "live": st.get("live"),
                                      "removed": [], "environment": {}}))
    out = answer(res)
    if not out.get("ok"):
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"switch: {out.get('error')}",
                          data={"decision": {**decision, "action": "fail"}, "live": live_env(st)})
    env = dict(out.get("environment") or {})
    data = {k: v for k, v in out.items() if k not in ("ok", "environment")}
    data["decision"] = {**decision, "to": out.get("to", decision["to"])}
    environment = {"state": "live", "live": {**env, "path": out.get("live")}, "previous": out.get("from"),
                   "switched": bool(out.get("changed")), "removed": out.get("removed") or [], "disk": out.get("disk")}
    live = out.get("live") or st.get("live")
    facts = {STAGED_FACT: None}
    if not out.get("changed"):
        return TaskResult(Status.OK, data=data, environment=environment, venv=live, facts=facts,
                          msg=f"v{data['decision']['to']} is already the live environment")
    removed = out.get("removed") or []
    torch = f" (torch {env.get('torch')})" if env.get("torch") else ""
    gone = st.get("live_missing") if st.get("live_missing") is not None else out.get("live_missing")
    src = f"v{out.get('from')}" if out.get("from") is not None else "the live folder"
    return TaskResult(Status.CHANGED, data=data, environment=environment, venv=live, facts=facts,
                      msg=f"{live}: {src} -> v{data['decision']['to']}{torch}"
                          + (f"; adopted the old folder as v{out['adopted']}" if out.get("adopted") else "")
                          + (f"; removed {', '.join(f'v{k}' for k in removed)}" if removed else "")
                          + (f"; the live version v{gone} is missing (its folder is gone)" if gone is not None else ""))


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`switch A -> B` (from the live version to the one it would make live), `skip` (nothing to change) "
    "or `fail` with the cause; shown after the builds."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Switch the live venv to the verified environment
  venv_switch:
    to: staged
    keep: 3
  tags: [always]
"""

ACTION = Action(name="venv_switch", args=VenvSwitchArgs, phase="install", timeout_s=600.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
