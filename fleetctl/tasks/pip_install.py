"""``pip_install``: install a wheel into the host's venv with ``--force-reinstall --no-deps``.

The decision reads the host's real installed state, not only fleetctl's own record: the package's
dist-info in the venv (its ``RECORD``, hashed) must still be the one fleetctl installed, so a
package uninstalled or replaced by hand is installed again. Installing the same wheel (same
SHA-256) again is skipped unless ``--force``.

torch is guarded three ways:

- before installing, the torch the wheel was built against (its build stamp, recorded inside the
  build) must be the venv's torch, read from ``torch/version.py`` without importing torch: a wheel
  built before torch was upgraded fails here, naming both;
- with dependencies allowed (``no_deps: false``) the install is constrained to the venv's torch;
- if torch changed anyway, the task FAILS and rolls back: the previous wheel (kept by content under
  ``<workdir>/installed/<key>/<dist>.wheels/``, the venv's own: :data:`.venv_state.RECORD_LAYOUT`,
  :func:`.pip_rollback.keep_wheel`) is
  reinstalled, or the new package removed, and the previous torch version reinstalled (or the
  exact command to do it is named).

Every other distribution's version is compared before and after (added, changed, removed are
reported), and ``pip check`` problems the install brought are reported too. Every command runs
from ``/`` with ``PYTHONPATH``, ``VIRTUAL_ENV`` and ``CONDA_PREFIX`` unset.

The install goes into the venv whatever the login user's pip configuration says: pip runs with
``PIP_USER=0`` (a pip.conf's ``install.user = true`` or ``PIP_USER=1`` would send it to
``~/.local``), and an install that exits 0 but leaves the distribution outside the venv's
``sys.prefix`` (or not on its ``sys.path``) FAILS naming the pip setting that sent it there. A copy
outside the venv (left by such an install) is never taken for the installed wheel; it is named.
Another environment's copy on the venv's sys.path (a ``.pth`` line naming its site-packages) is
said as what it is, where the install went and which copy Python imports, and left alone; one a
``.pth`` puts ahead of the venv's site-packages shadows the new install, which FAILS naming both
copies and the ``.pth`` (:func:`.venv_copies.outside_copy`, :func:`.venv_copies.misplaced`).

A venv pip cannot write (not writable by the login user, read-only, full: facts'
``python.site_packages_fs``) is refused while planning, before anything is built or installed, when
an install is needed (:func:`.install_room.unwritable_venv`: a read-only venv already holding this
wheel is ok; :func:`fleetctl.facts.venv.install_problem`, which ``fleetctl facts`` warns with); a wheel whose
unpacked size does not fit the venv's free space is refused before pip runs: pip would stop with
ENOSPC and leave a partial install. ``--plan``, ``--dry-run`` and the deploy use one estimate of
that room (:func:`fleetctl.facts.venv.install_need_mib`); a wheel not on the host yet (``--plan``, a
deploy's planning pass) counts the real unpacked size of its arch class's wheel when the controller's
cache holds it (a member is pushed it), else the estimate for a wheel not built yet, so a venv
without room is refused before the build.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import field_validator

from ..connection.base import CommandResult
from ..status import Status
from ..build.wheeltags import refusal
from .argtypes import ActionArgs, non_empty
from .base import Action, HostView, Plan, TaskResult, first_error_line
from .causes import install_cause
from .build_keys import STAMP_NAME
from .build_preflight import CLEAN_PYTHON_ENV
from .venv_probe import PIP_INSTALL_ENV
from .install_target import (INSTALL_RECORD, dropped_by, record_folder, recorded_dist, shared_message, target_ids,
                             unreadable_target, venv_mark)
from .envs import STAGED_FACT, installed_dir
from .install_room import room_for, unwritable_venv
from .pip_rollback import damaged_since_built, keep_wheel, roll_back
from .pytool import index_tool, pick_tool
from .steps import Note, Put, Run, TargetClaim, probe
from ..facts.venv_locks import locked_line, unreadable_line
from .venv_copies import misplaced, outside_copy, outside_note, stash_line
from .venv_modes import in_venv_modes
from .venv_state import (STATE_SCRIPT, built_against, check_argv, check_problems, dist_changes, norm_dist, parse_state,
                         state_failure)
from .venv_state import record_path as venv_record
from ..util.torchname import torch_label

_MISSING = object()

class PipInstallArgs(ActionArgs):
    """``pip_install``: install a wheel into the host's venv.

    Attributes:
        wheel: remote wheel path, or a glob (``"{{ out_dir }}/fp4_kernels-*.whl"``) that must match
            exactly one file.
        force_reinstall: reinstall even when the same version is installed.
        no_deps: do not install dependencies.
        keep_previous: keep the previously installed wheel so that a failed verify can roll back.
        tool: ``"uv"``, ``"pip"``, or ``"auto"``: uv when the host has it, except an install that
            reads the index (``no_deps: false``, torch put back) uses the venv's pip when it has
            pip, which honours the site's pip.conf (:func:`fleetctl.tasks.pytool.index_tool`).
    """

    wheel: str
    force_reinstall: bool = True
    no_deps: bool = True
    keep_previous: bool = True
    tool: Literal["auto", "uv", "pip"] = "auto"

    @field_validator("wheel")
    @classmethod
    def _wheel(cls, v: str) -> str:
        return non_empty(v, "wheel")


def dist_name(wheel: str) -> str:
    """The distribution name of a wheel file (``fp4_kernels-0.1.0-cp312-...whl`` -> ``fp4_kernels``)."""
    return posixpath.basename(wheel).split("-")[0]


def install_argv(tool: str, python: str, uv: str | None, wheel: str, args: PipInstallArgs,
                 constraint: str | None = None) -> list[str]:
    """``uv pip install --python PY`` or ``PY -m pip install``, with the task's flags (and a
    constraints file pinning torch when dependencies may be installed).

    uv gets ``--no-cache --link-mode copy`` (uv's docs, "uv pip install": ``--link-mode``,
    ``--no-cache``): uv's default link mode on Linux hard-links installed files from its cache, so a
    damaged installed file (a truncated ``.so``) is the cached copy too, and a reinstall, even with
    ``--force-reinstall --refresh-package``, links the damaged file again (uv 0.13 treats a cached
    unpack of a local wheel whose path and mtime are unchanged as fresh). Reading the uploaded wheel
    again into a temporary cache and copying gives the venv files of its own, so a reinstall repairs."""
    flags = (["--force-reinstall"] if args.force_reinstall else []) + (["--no-deps"] if args.no_deps else [])
    if constraint:
        flags += ["--constraint", constraint]
    if tool == "uv":
        return [uv or "uv", "pip", "install", "--python", python, "--no-cache", "--link-mode", "copy", *flags, wheel]
    return [python, "-m", "pip", "install", "--no-input", *flags, wheel]


def _reinstall_argv(args: PipInstallArgs, python: str, uv: str | None):
    """``(tool, wheel) -> argv`` of a ``--force-reinstall --no-deps`` install (the roll-back's)."""
    return lambda tool, wheel: in_venv_modes(python, install_argv(tool, python, uv, wheel, PipInstallArgs(
        wheel=wheel, force_reinstall=True, no_deps=True, tool=args.tool)))


def plan(args: PipInstallArgs, host: HostView) -> Plan:
    """Install unless this exact wheel is what the venv holds; FAILED (and rolled back) if torch moved."""
    wheel = args.wheel
    if any(c in wheel for c in "*?["):
        known = [p for p in host.files if fnmatch.fnmatchcase(p, wheel)]
        if len(known) == 1:
            wheel = known[0]
        else:
            found = yield probe(["/bin/sh", "-c", 'for f in $1; do [ -e "$f" ] && echo "$f"; done', "sh", wheel],
                                f"the wheel matching {wheel}")
            matches = found.stdout_text.split()
            if len(matches) != 1:
                return TaskResult(Status.FAILED, msg=f"wheel pattern {wheel} matches {len(matches)} files, expected 1")
            wheel = matches[0]
    if not host.venv:
        return TaskResult(Status.FAILED, msg="no venv for this host: set the host var 'venv'")
    unreadable = unreadable_target(host.facts, ("venv",))
    if unreadable:
        return TaskResult(Status.FAILED, msg=unreadable, data={"decision": {"action": "fail"}})
    ids = target_ids(host.facts, ("venv",))
    archs = (host.facts.get("build") or {}).get("torch_cuda_arch_list")
    shared = (yield TargetClaim(ids=ids, archs=archs, writes=("venv",),
                                reason="does another host install into this venv?")) if ids else ()
    if shared:
        return TaskResult(Status.FAILED, msg=shared_message(host.name, shared), data={"decision": {"action": "fail"}})
    tool, uv, problem = pick_tool(args.tool, host.facts, host.venv, host.python)
    if problem:
        return TaskResult(Status.FAILED, msg=problem, data={"decision": {"action": "fail"}})
    if not args.no_deps:  # dependencies come from the index: the venv's pip reads the site's pip.conf
        tool = index_tool(args.tool, tool, host.facts)
    dist = dist_name(wheel)
    if dist.startswith("<"):  # this run's build has not written it yet (--plan, --dry-run): no name to read
        dist = recorded_dist(host.facts) or dist
    record_base = posixpath.join(installed_dir(host.workdir), f"{dist}.json")  # the probe adds the venv's key
    stamp_path = posixpath.join(posixpath.dirname(wheel), STAMP_NAME)
    digest = host.files.get(wheel, _MISSING)
    if digest is _MISSING:
        res = yield probe(["sha256sum", wheel], f"the sha256 of {posixpath.basename(wheel)}")
        if res.rc != 0:
            return TaskResult(Status.FAILED, msg=f"wheel {wheel}: {first_error_line(res)}")
        digest = res.stdout_text.split()[0]
    # "hash": the installed files are compared with their RECORD's hashes, not only sizes (a file
    # overwritten in place at its size said "nothing changed"; operator trial): one read of the
    # package's own files, in the same probe (no round trip more), and only when its answer is not kept
    state_argv = (host.python, "-c", STATE_SCRIPT, dist, record_base, stamp_path, "hash")
    state_res = yield probe(state_argv, f"what {host.venv} holds now (dist-info, torch, every distribution)",
                            timeout_s=300, env=CLEAN_PYTHON_ENV, cwd="/")
    before = parse_state(state_res)
    if before.get("error"):  # unknown is not "nothing installed": torch could not be guarded
        return TaskResult(Status.FAILED, msg=state_failure(before, host.python, "before the install") + "; nothing was installed",
                          data={"decision": {"action": "fail"}})
    previous = before.get("record") or None
    if previous is not None and previous.get("venv") != before.get("venv"):
        previous = None  # not this venv's (venv_state.RECORD_LAYOUT): never "already installed" on a guess
    # this venv's own record (the probe's venv: a dry run's staged version answers with its own path)
    record_path = venv_record(installed_dir(host.workdir), dist, before["venv"]) if before.get("venv") else None
    held = before.get("dist") or {}
    if previous is None and held:  # no record in this host's workdir: the venv's own says what is there
        previous = venv_mark(host.facts, dist)
    # the wheel's build stamp: the host's, else the one this run's build of it will write (a wheel
    # a dry run or --plan has not built yet): what it is built for never waits for the wheel
    stamp = before.get("stamp") or host.stamps.get(wheel) or {}
    built = built_against(stamp)
    if built and before.get("torch") and (built[0], built[1]) != (before.get("torch"), before.get("cuda")):
        return TaskResult(Status.FAILED, data={"decision": {"action": "fail"}},
                          msg=f"torch drift: {posixpath.basename(wheel)} was built against {torch_label(*built)}, "
                              f"but {host.venv} runs {torch_label(before.get('torch'), before.get('cuda'))}: rebuild it "
                              "for this torch (run its build_wheel task again); "
                              "nothing was installed")
    # defence in depth: a wheel whose tag (or build libc) pip on this host would refuse, or that
    # would not load, is never installed, whatever put it here
    misfit = refusal(host.name, wheel, host.facts, stamp.get("inputs"))
    if misfit is not None:
        return TaskResult(Status.FAILED, data={"decision": {"action": "fail"}}, msg=f"{misfit}; nothing was installed")
    new_archs = (stamp.get("inputs") or {}).get("archs")
    lost = dropped_by(host.name, host.venv, host.facts, new_archs) if ids else None
    if lost is not None:  # another run's host installed into this shared venv: known from facts and
        # the build's inputs, so it stops the host while planning, before a build it would waste
        return TaskResult(Status.FAILED, data={"decision": {"action": "fail"}}, msg=f"{lost}; nothing was installed",
                          preflight=True)
    damaged = held.get("damaged") or []
    unreadable = unreadable_line(dist, held)  # made under a login's umask 077 by an older fleetctl
    same = (previous is not None and digest is not None and previous.get("sha256") == digest
            and held.get("record_sha256") and held.get("record_sha256") == previous.get("record_sha256")
            and not damaged and not unreadable and held.get("in_venv") is not False)
    stash = stash_line(held, dist)
    if same and not host.force:
        if stash:
            yield Note(message=stash)
        return TaskResult(Status.OK, msg=f"{posixpath.basename(wheel)} already installed (same sha256)"
                          + (f"; {stash}" if stash else ""),
                          data={"wheel": previous.get("kept"), "sha256": digest, "skipped": True,
                                "decision": {"action": "skip"}})
    why = ("forced" if same else "nothing installed" if not held else
           outside_copy(held, dist) if held.get("in_venv") is False else
           f"installed files differ from their RECORD ({'; '.join(damaged)}"
           f"{'...' if held.get('n_damaged', 0) > len(damaged) else ''})" if damaged else
           unreadable if unreadable else
           "no install record of fleetctl's for this venv" if previous is None else
           "installed package differs from the wheel" if previous.get("sha256") == digest else
           "a new wheel")
    decision = {"action": "install", "why": why}
    # only now that an install is needed: a read-only venv holding this wheel was ok above
    full = unwritable_venv(host)  # facts alone: stops the host while planning, before the build
    if full:
        return TaskResult(Status.FAILED, msg=f"preflight: {full}", preflight=True,
                          data={"decision": {**decision, "action": "fail"}, "preflight": [full]})
    locked = locked_line(held, dist) if held.get("in_venv") is not False else None
    if locked:  # pip would fail half-way, its stash left behind: stops the host while planning
        return TaskResult(Status.FAILED, msg=f"preflight: {locked}; nothing was installed", preflight=True,
                          data={"decision": {**decision, "action": "fail"}, "preflight": [locked]})
    # pip unpacks (and may build) in TMPDIR: the run's private folder, not a login /tmp that may be
    # small, full or noexec
    env = {**PIP_INSTALL_ENV, "TMPDIR": host.run_dir}
    check_before = yield probe(check_argv(tool, host.python, uv), "pip check before the install", env=CLEAN_PYTHON_ENV,
                               cwd="/")
    constraint = None
    if not args.no_deps and before.get("torch"):
        constraint = posixpath.join(host.run_dir, "install-constraints.txt")
        err = yield Put(data=f"torch=={before['torch']}\n".encode(), remote=constraint, mode=0o600,
                        reason="dependencies may be installed, torch may not move")
        if err is not None:
            return TaskResult(Status.FAILED, msg=f"cannot write the install constraints: {err}")
    full = yield from room_for(host, wheel, stamp)
    if full:  # facts and probes alone: stops the host while planning, before the build of the wheel
        return TaskResult(Status.FAILED, msg=f"preflight: {full}; nothing was installed", preflight=True,
                          data={"decision": {**decision, "action": "fail"}, "preflight": [full]})
    # under the umask of the venv's site-packages, not the login's (venv_modes: 077 locked others out)
    argv = in_venv_modes(host.python, install_argv(tool, host.python, uv, wheel, args, constraint))
    res = yield Run(argv=tuple(argv), env=env,
                    cwd="/", reason=f"install {posixpath.basename(wheel)} ({why})")
    if res.rc != 0:
        damaged_wheel = yield from damaged_since_built(wheel, digest, stamp_path)
        if damaged_wheel:
            return TaskResult(Status.FAILED, rc=res.rc, msg=damaged_wheel, data={"decision": decision})
        hint = " (the install needs another torch than the venv's; fleetctl never lets an install move torch)" if (
            constraint and "torch" in (res.stdout_text + res.stderr_text).lower() and "conflict" in
            (res.stdout_text + res.stderr_text).lower()) else ""
        why_failed = yield from install_cause(res, host, f"{host.venv} or the TMPDIR {host.run_dir}")
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"install failed ({tool}): {why_failed}{hint}",
                          data={"decision": decision})
    # simulated (--plan, --dry-run): the install lands in the venv's site-packages (facts) and comes first
    into = held.get("venv_copy") or (host.facts.get("python") or {}).get("site_packages") or host.venv
    assume = {**before, "simulated": True, "dist": {**held, "record_sha256": None, "in_venv": True, "user_site": False,
                                                    "location": into, "via": None}}
    after_res = yield Run(argv=state_argv, mutating=False, after_change=True, quiet=True, timeout_s=300,
                          env=CLEAN_PYTHON_ENV, cwd="/", reason="torch and the other distributions unchanged?",
                          assume=CommandResult(argv=[], rc=0, stdout=json.dumps(assume).encode()))
    after = parse_state(after_res)
    if after.get("error"):  # no answer is not "torch is gone": nothing to roll back on a guess
        return TaskResult(Status.FAILED, data={"wheel": wheel, "sha256": digest, "tool": tool, "decision": decision},
                          msg=f"installed {posixpath.basename(wheel)}, but whether torch moved is unknown: "
                              + state_failure(after, host.python, "after the install"))
    elsewhere = misplaced(after.get("dist"), dist, host.venv, tool)
    if elsewhere:  # pip exited 0, but not into this venv: verify would fail naming no cause
        return TaskResult(Status.FAILED, msg=elsewhere, data={"wheel": wheel, "sha256": digest, "tool": tool,
                                                              "decision": decision})
    check_after = yield Run(argv=tuple(check_argv(tool, host.python, uv)), mutating=False, after_change=True, quiet=True,
                            env=CLEAN_PYTHON_ENV, cwd="/", reason="pip check after the install")
    old_problems = set(check_problems(check_before))
    new_problems = [p for p in check_problems(check_after) if p not in old_problems]
    others = dist_changes(before.get("dists") or {}, after.get("dists") or {}, norm_dist(dist))
    data: dict[str, Any] = {"wheel": wheel, "sha256": digest, "tool": tool, "previous": previous, "decision": decision,
                            "torch_before": {"torch": before.get("torch"), "cuda": before.get("cuda")},
                            "torch_after": {"torch": after.get("torch"), "cuda": after.get("cuda")},
                            "other_changes": others, "pip_check": new_problems,
                            "pip_check_before": sorted(old_problems)}
    if (before.get("torch"), before.get("cuda")) != (after.get("torch"), after.get("cuda")):
        result = yield from roll_back(host, tool, index_tool(args.tool, tool, host.facts), uv, dist, previous,
                                         before, after, data, env, _reinstall_argv(args, host.python, uv))
        return result
    if args.keep_previous and record_path:
        keep_dir = posixpath.dirname(record_path)  # this venv's own (venv_state.RECORD_LAYOUT)
        yield Run(argv=("mkdir", "-p", "-m", "0700", installed_dir(host.workdir), keep_dir), quiet=True)
        kept = yield from keep_wheel(keep_dir, wheel, digest, dist, (previous or {}).get("kept"))
        rec = {"dist": dist, "venv": before.get("venv"), "sha256": digest, "kept": kept,
               "previous": (previous or {}).get("kept"), "record_sha256": (after.get("dist") or {}).get("record_sha256")}
        yield Put(data=json.dumps(rec).encode(), remote=record_path, mode=0o600, reason="the install record")
        data["kept"] = kept
    if ids:  # who installed last: a host of another run sharing this venv reads it in its facts, and
        # any host reaching the venv through another workdir reads what is installed (venv_mark)
        mark = {"host": host.name, "archs": new_archs, "wheel": posixpath.basename(wheel), "dist": dist,
                "sha256": digest, "record_sha256": (after.get("dist") or {}).get("record_sha256"),
                "inputs": stamp.get("inputs")}  # what the wheel was built from: a second name's --plan reads it
        # a staged version (host.venv after venv_stage) gets its own record: it becomes the live
        # venv's only with the switch, and a failed staged deploy leaves the live record as it was
        into = host.venv if host.facts.get(STAGED_FACT) else ids["venv"][1]
        # the venv it is written for, so that a copy of the venv does not take it for its own (a staged
        # version's facts are the live folder's: its record keeps none and counts wherever it is)
        mark.update({} if host.facts.get(STAGED_FACT) else record_folder(host.facts))
        yield Put(data=json.dumps(mark).encode(), remote=posixpath.join(into, INSTALL_RECORD), mode=0o644,
                  reason="who installed into this venv, for hosts of other runs sharing it")
    version = re.sub(r"\.whl$", "", posixpath.basename(wheel))
    notes = []
    if held.get("in_venv") is False:  # the venv's copy now comes first on sys.path; the stray one stays
        notes.append(outside_note(held, after.get("dist") or {}, dist, done=not after.get("simulated")))
    if others:
        notes.append(f"the install also changed other packages: {', '.join(others)}")
    if new_problems:
        notes.append(f"pip check: {'; '.join(new_problems)}")
    if stash:  # read before the install: pip's stash of an earlier one that failed half-way
        notes.append(stash)
    for note in notes:
        yield Note(message=note)
    return TaskResult(Status.CHANGED, data=data,
                      msg=f"installed {version} ({tool}): {_as_done(why)}; "
                          + (f"torch {after['torch']} unchanged" if after.get("torch") else "no torch in the venv, none added")
                          + "".join(f"; {n}" for n in notes))


def _as_done(why: str) -> str:
    """The install's reason (``decision["why"]``, which ``--plan`` shows ahead of it) as what the
    install did: ``nothing installed`` after ``installed X`` read as a contradiction (fresh
    operator's trial), so ``none was installed before``; ``forced`` -> ``reinstalled (--force)``;
    ``a new wheel`` -> ``replaced the earlier wheel``; any other cause -> ``replaced what was
    there: CAUSE``."""
    if why.startswith("none in the venv"):  # nothing of the venv's was replaced (another environment's copy)
        return why.replace("none in the venv", "none was in the venv before", 1)
    return {"nothing installed": "none was installed before", "forced": "reinstalled (--force)",
            "a new wheel": "replaced the earlier wheel"}.get(why, f"replaced what was there: {why}")


#: A wheel named by a build that --tags left out and that has not built it on this host yet.
NO_WHEEL_YET = "no wheel was built on this host yet: run with --tags build first, or without --tags"

#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "In a play with a `build_wheel` task, folded into the build's row (`skip` or `reinstall`); "
    "otherwise `install` (with why), `skip` (this wheel is installed) or `fail` with the cause (a wheel "
    "that does not fit the venv's Python or platform, no pip and no uv)."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Install the wheel (--force-reinstall --no-deps)
  pip_install:
    wheel: "{{ workdir }}/wheels/fp4_kernels-*.whl"
  register: install
  tags: [install]
"""

ACTION = Action(name="pip_install", args=PipInstallArgs, phase="install", timeout_s=900.0, plan=plan,
                unapplied_hint=NO_WHEEL_YET,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
