"""``venv_stage``: make the next version of the host's venv beside the live one, and point the
play's later tasks at it.

The new version is a venv made at its final path ``<versions>/vN`` (``uv venv`` where the host has
uv, else the base interpreter's ``-m venv``) whose files are hard links to the live venv's, console
scripts rewritten for their new interpreter; it must reproduce the live venv's ``pip freeze``
exactly (see ``playbooks/scripts/venv_envs.py``). The live venv is only read. From this task on,
the host's ``venv`` and ``python`` (templates, builds, installs, verify) are the staged version's,
and its python facts (torch, its CUDA build) are re-read from it; ``venv_switch`` makes it live.
A stage left by a failed run is removed by the next stage (never the live one).
"""

from __future__ import annotations

import posixpath
from typing import Literal

from ..status import Status
from ..util.paths import tidy_path
from .argtypes import ActionArgs
from .base import Action, HostView, Plan, TaskResult
from .envs import STAGED_FACT, answer, controller_problem, installed_dir, live_env, staged_environment, moved_facts, script_argv, simulated, status_probe, upload, venv_facts, versions_dir
from .build_preflight import CLEAN_PYTHON_ENV
from .steps import Note, Run


class VenvStageArgs(ActionArgs):
    """``venv_stage``: stage the next version of the host's venv.

    Attributes:
        versions_dir: the folder holding the versions (must be on the venv's file system: hard
            links and the adoption of the live folder are renames, not copies); empty or ``None``:
            ``.<venv name>-versions`` beside the venv (:func:`fleetctl.tasks.envs.versions_dir`
            says why). Once the venv is a symlink to a version, the folder it points into is used.
            A folder that other users could not reach while they can run the venv now is refused
            while planning (nothing switched): after the switch the venv path leads into it.
        tool: ``auto`` (``uv venv`` where the host has uv), ``uv`` or ``venv`` (``python -m venv``).
    """

    versions_dir: str | None = None
    tool: Literal["auto", "uv", "venv"] = "auto"


def plan(args: VenvStageArgs, host: HostView) -> Plan:
    """Status, checks, stage, then the staged venv's facts; CHANGED with the new venv."""
    if not host.venv:
        return TaskResult(Status.FAILED, msg="no venv for this host: set the host var 'venv'",
                          data={"decision": {"action": "fail"}})
    own = controller_problem(host, host.venv)
    if own:  # before anything is uploaded or changed
        return TaskResult(Status.FAILED, msg=f"preflight: {own}", data={"decision": {"action": "fail"}})
    folder = tidy_path(args.versions_dir) if args.versions_dir else versions_dir(host.venv)  # one spelling (settings')
    remote = yield from upload(host)
    if remote.startswith("!"):
        return TaskResult(Status.FAILED, msg=f"venv_stage: {remote[1:]}")
    st = answer((yield status_probe(remote, host.venv, folder, host.workdir)))
    if not st.get("ok"):
        return TaskResult(Status.FAILED, msg=f"venv_stage: {st.get('error')}", data={"decision": {"action": "fail"}})
    if host.facts.get(STAGED_FACT):
        return TaskResult(Status.OK, msg=f"{host.venv} is already a staged version",
                          data={"decision": {"action": "skip", "why": "already staged"}})
    live = st.get("live") or host.venv
    problem = controller_problem(host, st.get("target"), live)
    if st.get("staged_version") is not None:
        # a version folder that is not live given as the venv: staging "from" it would stage the
        # live venv instead, and no switch could follow (nothing staged by this run)
        problem = (f"venv {host.venv} is v{st['staged_version']} of {st.get('versions_dir')}, not the live venv: set "
                   f"the host var venv to the live path {live}")
    elif problem:
        pass
    elif st.get("kind") == "missing":
        problem = f"venv {live} does not exist"
    elif st.get("live_missing") is not None:
        # the folder the venv path points to is gone (moved or deleted by hand): nothing to stage from
        problem = (f"the live version v{st['live_missing']} of {live} is missing ({st.get('target')} is gone): "
                   f"nothing to stage from; put it back, or roll back to a kept version first (fleetctl rollback --to N)")
    elif st.get("unmanaged_link"):
        problem = (f"venv {live} is a symlink to {st.get('target')} that fleetctl did not make: set the venv var to "
                   "the real folder, or make it one")
    elif st.get("kind") != "dir" and st.get("kind") != "symlink":
        problem = f"venv {live} is not a folder"
    elif st.get("parent_writable") is False or st.get("versions_writable") is False:
        problem = unwritable(st, live, folder)
    elif st.get("others_reach_live") and not st.get("others_reach_versions"):
        # the switch makes the venv path a symlink into the versions folder: a folder other users
        # cannot search (o-x on the way) would take the venv from everyone but the login user
        problem = (f"host {host.name}: other users can run {live} now but could not reach the versions folder "
                   f"{st.get('versions_dir') or folder} (a folder on the way is not o+x): after the switch they "
                   f"could not run the venv; unset the host var venv_versions_dir (the default is beside the venv, "
                   f"{versions_dir(live)}) or set it to a folder they can reach")
    elif st.get("same_fs") is False:
        problem = (f"the versions folder {st.get('versions_dir')} is on another file system than {live}: a stage "
                   "would copy every file instead of linking it; set the host var venv_versions_dir "
                   "(or venv_stage's versions_dir) to a folder on the venv's file system")
    uv = (host.facts.get("uv") or {}).get("path")
    if args.tool == "uv" and not uv:
        problem = "tool: uv, but the host has no uv (facts: uv.path)"
    folder = st.get("versions_dir") or folder
    n = st.get("next")
    decision = {"action": "stage", "version": n, "from": st.get("live_version") or "live folder",
                "versions_dir": folder, "tool": "uv venv" if uv and args.tool != "venv" else "python -m venv"}
    if problem:
        return TaskResult(Status.FAILED, msg=f"preflight: {problem}", data={"decision": {**decision, "action": "fail"}})
    if host.keep_live:
        return keep(st, live)
    dest = posixpath.join(folder, f"v{n}")
    # the live venv's install records become the new version's (same files): the deploy skips what --plan skips
    argv = ["--venv", live, "--versions", folder, "--run-id", posixpath.basename(host.run_dir),
            "--installed", installed_dir(host.workdir)]
    if uv and args.tool != "venv":
        argv += ["--uv", uv]
    res = yield Run(argv=script_argv(remote, "stage", *argv), env=CLEAN_PYTHON_ENV, cwd="/", timeout_s=None, quiet=True,
                    reason=f"make v{n} beside the live venv: a new venv at its final path, the live one's files "
                           "hard-linked, its pip freeze checked",
                    assume=simulated({"version": n, "path": dest, "versions_dir": folder, "live": live,
                                      "live_version": st.get("live_version"), "adopt_as": st.get("adopt_as"),
                                      "simulated": True}))
    out = answer(res)
    if not out.get("ok"):
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"stage: {out.get('error')}",
                          data={"decision": {**decision, "action": "fail"}})
    dest = out.get("path") or dest
    n = out.get("version", n)
    adopt = (f"{live} is a real folder: the switch adopts it as v{st['adopt_as']} (moved into {folder}, not "
             f"copied) and puts a symlink in its place") if st.get("adopt_as") else ""
    staged = {"version": n, "path": dest, "live": live, "live_version": st.get("live_version"), "versions_dir": folder}
    if out.get("simulated"):
        # v{n} does not exist while planning: the tasks after this one use v{n} as a deploy does
        # (their commands name its paths: a dry run shows what the deploy runs), and their probes
        # are asked of the live venv, which v{n} reproduces file for file (stand_in); the facts are
        # the ones the deploy's stage assumes before it reads v{n}'s own
        assumed = moved_facts(host.facts, tuple(p for p in (live, st.get("target")) if p), dest)
        facts, _ = yield from venv_facts(host, dest, assumed)  # the steps the deploy runs; a dry run answers assumed
        return TaskResult(Status.CHANGED, data={"decision": decision, "path": dest, "version": n},
                          venv=dest, stand_in=(dest, live), facts={**facts, STAGED_FACT: {**staged, "simulated": True}},
                          msg=f"would stage v{n} at {dest} ({decision['tool']}, the live venv's files hard-linked); "
                              f"the tasks after it run in v{n}, their probes asked of {live}, which v{n} reproduces"
                              + (f"; {adopt}" if adopt else ""))
    # told only when a version was really staged (not in a planning pass, not when kept)
    if adopt:
        yield Note(message=adopt)
    if st.get("kind") == "symlink" and st.get("others_reach_path") and not st.get("others_reach_live"):
        # versions kept where the default used to be (<workdir>/envs, private): kept working there
        # (each version is made at its final path, so they cannot be moved), but say who is locked out
        yield Note(message=f"other users cannot run {live}: it leads into {folder}, which they cannot reach (kept "
                           f"where versions went before {versions_dir(live)} beside the venv became the default); "
                           f"make {live} a real venv again to have its versions kept beside it")
    assumed = moved_facts(host.facts, tuple(p for p in (live, st.get("target")) if p), dest)
    facts, err = yield from venv_facts(host, dest, assumed)
    if err:
        return TaskResult(Status.FAILED, msg=f"stage v{n}: {err}", data={"decision": decision})
    size = ((out.get("disk") or {}).get("versions") or {}).get(str(n)) or {}
    staged.update(size_mib=size.get("size_mib"), copied_mib=out.get("copied_mib"))
    environment = staged_environment(live_env(st), staged, facts)
    facts[STAGED_FACT] = {**staged, "live_env": environment["live"]}
    data = {k: v for k, v in out.items() if k != "ok"}
    data["decision"] = {**decision, "version": n}
    linked = out.get("linked_files")
    how = f"{linked} files hard-linked" if linked is not None else "files hard-linked"
    if out.get("copied_files"):
        how += f", {out['copied_files']} copied ({out.get('copied_mib')} MiB)"
    return TaskResult(Status.CHANGED, data=data, venv=dest, facts=facts, environment=environment,
                      msg=f"staged v{n} at {dest} ({out.get('made_with', decision['tool'])}, {how}, "
                          f"{out.get('packages', '?')} packages as live, {out.get('seconds', 0)} s); the live venv is untouched")


def unwritable(st: dict, live: str, folder: str) -> str:
    """Why the login user could not stage or switch ``live`` (the status probe's ``parent_writable``
    and ``versions_writable``, from ``os.access`` on the host), with the fix. The rights come from
    docs/staged.md: the stage makes the versions folder (default ``.<name>-versions`` beside the
    venv) and a version in it; the switch renames a symlink over the venv path, in its parent."""
    user = st.get("user") or "the login user"
    folder = st.get("versions_dir") or folder
    if st.get("parent_writable") is False:
        parent = st.get("parent") or posixpath.dirname(live)
        return (f"the venv's parent {parent} is not writable by {user}: --staged makes "
                f"{posixpath.basename(versions_dir(live))} beside the venv and renames a symlink over it; fix: "
                f"give {user} write access to {parent} (chown or chmod), or keep the venv in a folder {user} owns, "
                "or deploy without --staged")
    probe = st.get("versions_probe") or folder
    what = (f"the versions folder {folder} is" if probe == folder
            else f"{probe}, where the versions folder {folder} would be made, is")
    return (f"{what} not writable by {user}: the stage makes each version there; fix: give {user} write access "
            f"to {probe} (chown or chmod), or set the host var venv_versions_dir to a folder {user} can write on "
            "the venv's file system")


def keep(st: dict, live: str) -> TaskResult:
    """The stage when nothing after it would change the host (:attr:`HostView.keep_live`, decided
    by the engine from the host's planned pass): no new version, the live one stays live. A
    version made only to be switched to would differ from the live one in nothing but its number,
    yet the switch would still mean restarting the serving stack, and each such run would push an
    older version (the adopted v1 first) out of the kept ones. ``venv_switch`` reads the marker
    this leaves in :data:`STAGED_FACT` and keeps the live version too."""
    version = st.get("live_version")
    where = f"v{version}" if version is not None else f"the live folder {live} (not staged yet)"
    msg = f"nothing to change: the live venv stays {where}"
    environment = {"state": "live", "switched": False, "live": live_env(st), "previous": None, "removed": []}
    return TaskResult(Status.OK, msg=msg,
                      data={"decision": {"action": "skip", "why": "nothing to change", "version": version}},
                      facts={STAGED_FACT: {"kept": True, "live": live, "live_version": version, "msg": msg}},
                      environment=environment)


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`stage vN` (the version it would make), `skip` (already staged, or nothing between the stage and "
    "the switch changes anything) or `fail` with the preflight's cause; shown before the builds."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Stage the next environment beside the live venv
  venv_stage: {}
  tags: [always]
"""

ACTION = Action(name="venv_stage", args=VenvStageArgs, phase="install", timeout_s=1800.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
