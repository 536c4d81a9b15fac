"""``fleetctl deploy --plan``: what a deploy would do on each host, and why, touching nothing.

For every ``build_wheel`` task whose source a ``copy`` task uploads from a local folder (the shape
of the main job), the build inputs are computed on the controller (local source tree hash, the
host's facts, the task's defines) and compared with what the host holds:

- ``skip``: the wheel for exactly these inputs is installed (its stamp and install record agree);
- ``reinstall``: that wheel was built on the host but another one is installed;
- ``push``: another host of the same arch class builds (or already holds) it: it will be pushed;
- ``build``: nobody has it; the first host of each class builds.

``changed`` names the inputs that differ from those of the installed wheel (``tree``, ``archs``,
``torch``, ``cuda``, ``python``, ``defines``...), or ``nothing installed``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import templating
from .errors import FleetError, HostUnreachable
from .fanout import for_each_host
from .inventory import Host
from .playbook import Playbook
from .runrecord import RunRecord
from .session import gather_host_facts, open_session
from .tasks.base import TaskContext
from .tasks.build_wheel import STAMP_NAME, build_inputs, build_key, local_tree_hash, target_plan
from .tasks.pip_install import installed_dir
from .tasks.copy import local_files
from .build import cmake_defines

_STAMPS = (f'for f in "$1"/*/{STAMP_NAME}; do [ -f "$f" ] && {{ cat "$f"; echo; }}; done; '
           'for f in "$2"/*.json; do [ -f "$f" ] && { printf "INSTALLED "; cat "$f"; echo; }; done; true')


def _copy_sources(playbook: Playbook, ctx_vars: dict[str, Any]) -> dict[str, Path]:
    """Remote dest -> local source folder, for every copy task of the play."""
    out = {}
    for task in playbook.tasks:
        if task.action == "copy":
            args = task.resolve_args(ctx_vars)
            out[args.dest.rstrip("/")] = playbook.local_path(args.src)
    return out


async def plan_host(host: Host, playbook: Playbook, record: RunRecord, opts) -> dict[str, Any]:
    """The plan for one host: ``{"builds": [{"task", "key", "action", "changed", ...}]}`` or an error."""
    from .play import _context

    try:
        session = await open_session(host, record.run_id, connect_timeout_s=opts.connect_timeout_s)
    except HostUnreachable as exc:
        return {"status": "unreachable", "error": exc.cause}
    try:
        await gather_host_facts(session, timeout_s=opts.facts_timeout_s)
        ctx_vars = _context(session, playbook, opts, record)
        sources = _copy_sources(playbook, ctx_vars)
        builds = []
        for task in playbook.tasks:
            if task.action != "build_wheel" or not task.should_run(ctx_vars):
                continue
            args = task.resolve_args(ctx_vars)
            local = sources.get(args.src.rstrip("/"))
            if local is None:
                builds.append({"task": task.display_name, "action": "build", "changed": ["source not from a copy task"]})
                continue
            plan = target_plan(session.facts, args)
            defines = cmake_defines({**session.facts, "build": plan}, args.cmake_defines)
            inputs = build_inputs(local_tree_hash(local_files(local)), plan, defines, session.facts, host.name)
            key = build_key(inputs)
            tctx = TaskContext(session=session, record=record, task_label="plan", timeout_s=120)
            res = await tctx.run(["/bin/sh", "-c", _STAMPS, "fleetctl-plan", args.out_dir,
                                  installed_dir(session.workdir)], quiet=True, mutating=False)
            stamps, installed = [], []
            for line in res.stdout_text.splitlines():
                try:
                    if line.startswith("INSTALLED "):
                        installed.append(json.loads(line[len("INSTALLED "):]))
                    elif line.strip():
                        stamps.append(json.loads(line))
                except ValueError:
                    continue
            mine = next((s for s in stamps if s.get("key") == key), None)
            installed_shas = {i.get("sha256") for i in installed}
            current = next((s for s in stamps if s.get("sha256") in installed_shas), None)
            if mine and mine.get("sha256") in installed_shas:
                action, changed = "skip", []
            else:
                action = "reinstall" if mine else "build"
                if current is None:
                    changed = ["nothing installed"]
                else:
                    old = current.get("inputs")
                    changed = (sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k)) or ["unknown"]
                               if old else ["inputs not recorded"])
            builds.append({"task": task.resolve_name(ctx_vars), "key": key[:16], "action": action, "changed": changed,
                           "archs": plan.get("torch_cuda_arch_list")})
        return {"status": "ok", "builds": builds}
    except (FleetError, templating.RenderError) as exc:
        return {"status": "failed", "error": str(exc)}
    finally:
        await session.conn.close()


async def plan_hosts(playbook: Playbook, hosts: Sequence[Host], *, record: RunRecord, opts) -> dict[str, dict[str, Any]]:
    """Plan every host, then mark all but one ``build`` per arch class as ``push``."""
    results = await for_each_host(hosts, lambda h: plan_host(h, playbook, record, opts), forks=opts.forks)
    have: set[str] = {b["key"] for r in results.values() for b in r.get("builds", []) if b["action"] in ("skip", "reinstall")}
    for r in results.values():
        for b in r.get("builds", []):
            if b["action"] == "build" and b.get("key"):
                if b["key"] in have:
                    b["action"] = "push"
                have.add(b["key"])
    return results
