"""``--plan``'s view for the terminal: the rows of a plan (:func:`plan_rows`: per host its builds,
their dependencies and staged environments, or its failure), the arch-class lines
(:func:`plan_classes`), the wording of what a plan would do (:func:`planned_status`,
:func:`planned_msg`) and the table (:func:`print_plan_table`, laid out by
:func:`fleetctl.reporting.tables.print_table`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from .tables import print_table

def plan_classes(rows: dict[str, dict[str, Any]]) -> list[str]:
    """``--plan``'s arch classes, one line each, from :func:`plan_rows`: the class key, its hosts
    (folded), arch list and platform, and who builds: ``3f2a... gpu[01-04] 9.0a linux_aarch64 glibc
    2.39 (build on gpu01)``.

    The builder is the deploy's (:meth:`fleetctl.engine.classes.ClassCoordinator.assign`): a
    member whose plan fails before any command would run (a later task's preflight) is withdrawn
    from its class and another member is planned as the builder, so a member whose row failed is
    neither the builder nor one receiving the wheel, whatever its build row said (new-user trial:
    ``(build on b-other)`` for a host that failed planning, the deploy then ``built on a-pv``).
    Only when no member that plans through builds is a failed member with the role ``build`` the
    builder: it builds, and fails at a later task (``fail`` after the build); never one the plan
    refused (a task of its failed before any command would run, marked ``refused_while_planning``
    by the engine: a venv it cannot write), which the deploy refuses before it builds (operator
    trial: ``(build on hro)`` for a host whose venv was not writable). A class whose members are
    all refused says ``(no builder: every member is refused)``. When several
    members build their own (``--build each``): ``(build on each host)``, or ``(build on each of
    HOSTS)`` when the others reuse theirs."""
    from ..inventory import fold_hosts

    classes: dict[str, dict[str, Any]] = {}
    for host, r in rows.items():
        for b in r.get("builds", []):
            if not b.get("key") or b["action"] == "fail":
                continue
            c = classes.setdefault(b["key"], {"hosts": [], "b": b, "builds": [], "failed": set(), "refused": []})
            c["hosts"].append(host)
            if r.get("status") != "ok":
                c["failed"].add(host)
            if r.get("refused"):
                c["refused"].append(host)
            elif b["action"].startswith("build"):
                c["builds"].append(host)
    for c in classes.values():
        c["builder"] = next((h for h in c["builds"] if h not in c["failed"]), c["builds"][0] if c["builds"] else None)
        c["hosts"] = [h for h in c["hosts"] if h not in c["failed"] or h == c["builder"]]
    lines = []
    for key, c in classes.items():
        b = c["b"]
        if not c["hosts"]:  # every member fails planning: each row says why
            if c["refused"] and len(c["refused"]) == len(c["failed"]):
                lines.append(f"{key} {fold_hosts(c['refused'])} {b.get('archs') or '?'} "
                             f"{b.get('platform') or 'platform unknown'} (no builder: every member is refused)")
            continue
        builds = [h for h in c["builds"] if h in c["hosts"]]
        how = ("build on each host" if len(builds) > 1 and len(builds) == len(c["hosts"]) else
               f"build on each of {fold_hosts(builds)}" if len(builds) > 1 else
               f"build on {c['builder']}" if c["builder"] else "no build")
        lines.append(f"{key} {fold_hosts(c['hosts'])} {b.get('archs') or '?'} {b.get('platform') or 'platform unknown'}"
                     f" ({how})")
    return lines


#: A planned change's past-tense verb (the planners' message, written as done) -> what it would do.
_WOULD = {"uploaded": "upload", "installed": "install", "built": "build", "pushed": "push", "staged": "stage",
          "upgraded": "upgrade", "reinstalled": "reinstall", "removed": "remove", "copied": "copy", "wrote": "write",
          "ran": "run", "switched": "switch", "fetched": "fetch", "applied": "apply", "patched": "patch"}


def planned_status(status: str) -> str:
    """A task's status as ``--plan`` shows it: ``would change`` for ``changed`` (a plan changes
    nothing: it says what a deploy would do); every other status as it is."""
    return "would change" if status == "changed" else status


def planned_msg(status: str, msg: str) -> str:
    """A planned change's message as what it WOULD do: the planners write it as done (``uploaded
    34 of 34 files``; ``--plan`` simulated the step), so its leading past-tense verb becomes
    ``would upload 34 of 34 files``; any other message as it is."""
    verb, _, rest = msg.partition(" ")
    if status != "changed" or verb not in _WOULD:
        return msg
    return f"would {_WOULD[verb]} {rest}".rstrip()


def plan_rows(hosts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per host, ``--plan``'s view of a planned run: ``{"status", "error"?, "refused"?, "builds":
    [...], "tasks": [...]}`` (``refused``: a task failed while planning, before any command would
    run: the deploy refuses the host). A build row's ``action`` is ``build``, ``push`` (the class's wheel comes
    from another member), ``reinstall`` (this host holds the wheel but another is installed) or
    ``skip`` (the wheel for exactly these inputs is installed); ``changed`` names the inputs that
    differ from the installed wheel's; ``why`` a reinstall's cause, the install's own (``nothing
    installed``, ``installed files differ from their RECORD (_C.so missing)``...)."""
    out: dict[str, dict[str, Any]] = {}
    for host, r in hosts.items():
        tasks = [t for t in r.get("tasks", []) if t.get("action") != "facts"]
        row: dict[str, Any] = {"status": "ok" if r.get("status") in ("ok", "running") else r.get("status"),
                               "tasks": [{"task": t["name"], "action": t["action"],
                                          "status": planned_status(t["status"]),
                                          "decision": (t.get("data") or {}).get("decision"),
                                          "msg": planned_msg(t["status"], t.get("msg", ""))}
                                         for t in tasks]}
        if r.get("error"):
            row["error"] = r["error"]
        if any((t.get("data") or {}).get("refused_while_planning") for t in tasks):
            row["refused"] = True  # the deploy refuses it before any command: it builds nothing
        installs = [t for t in tasks if t.get("action") == "pip_install"]
        builds = []
        for t in tasks:
            if t.get("action") != "build_wheel":
                continue
            d = (t.get("data") or {}).get("decision") or {}
            role = d.get("action")
            why = ""
            if role in ("reuse", "serve"):
                inst_d = ((installs[0].get("data") or {}).get("decision") or {}) if installs else {}
                inst = inst_d.get("action")
                action = "skip" if inst == "skip" or (inst is None and d.get("installed")) else "reinstall"
                why = str(inst_d.get("why") or "") if action == "reinstall" else ""
            elif role == "fail" or t.get("status") == "failed":
                action = "fail"
            else:
                action = role or "build"
                if action == "build" and d.get("forced"):
                    action = "build (forced)"
            builds.append({"task": t["name"], "key": d.get("key", ""), "action": action,
                           "changed": d.get("changed", []), "archs": d.get("archs"), "msg": t.get("msg", ""),
                           "platform": d.get("platform"), "deps": d.get("deps") or [], "why": why})
        row["builds"] = builds
        out[host] = row
    return out


#: The staged-environment actions, shown in ``--plan`` beside the builds.
ENV_ACTIONS = ("venv_stage", "venv_upgrade", "venv_switch")


def _env_row(host: str, t: dict[str, Any]) -> list[Any]:
    d = t.get("decision") or {}

    def v(x: Any) -> str:
        return f"v{x}" if isinstance(x, int) else str(x)

    what = {"stage": f"stage v{d.get('version')}", "switch": f"switch {v(d.get('from'))} -> {v(d.get('to'))}"}.get(
        str(d.get("action")), str(d.get("action") or t.get("status")))
    return [host, t["task"], Text(what, style="red" if d.get("action") == "fail" else "magenta"), "", "",
            t.get("msg", "")]


def dep_state(d: dict[str, Any]) -> str:
    """A build dependency's state in ``--plan``: ``cached`` (controller and host), ``send``,
    ``fetch+send``, ``online`` (no fetch_mirror: CMake downloads it), ``missing``."""
    if d.get("error") or (d.get("controller") is None and d.get("host") is None):
        return "missing"
    if d.get("controller") == "-":
        return "online"
    if d.get("host") == "cached" and d.get("controller") == "cached":
        return "cached"
    return "send" if d.get("controller") == "cached" else "fetch+send"


def dep_line(d: dict[str, Any]) -> str:
    """``NVIDIA/cutlass @ 57e3cfb47a2d (git); controller: cached, host: to send``."""
    if d.get("error") and not d.get("name"):
        return str(d["error"])
    ref = str(d.get("commit") or d.get("ref") or "?")
    return (f"{d.get('repo') or '?'} @ {ref[:12]} ({d.get('kind', '?')}); controller: {d.get('controller', '?')}, "
            f"host: {d.get('host', '?')}")


def print_plan_table(console: Console, title: str, rows: dict[str, dict[str, Any]]) -> None:
    """``--plan``'s table: host, task, action, arch list, class, changed inputs or the failure.
    Hosts that fail planning alike (one cause, as every host sharing one venv) share one row
    under their node set (``m[001-120]``): the cause is said once, not once per host."""
    from ..inventory import fold_hosts

    out: list[list[Any]] = []
    failing: dict[tuple[str, str], list[Any]] = {}  # cause -> its row (at its first host's place), then its hosts
    for host, r in rows.items():
        if r.get("status") != "ok":
            status, error = str(r.get("status", "?")), str(r.get("error", ""))
            if (status, error) not in failing:
                failing[(status, error)] = [[host, "", Text(status, style="red"), "", "", error]]
                out.append(failing[(status, error)][0])
            failing[(status, error)].append(host)
            continue
        envs = [t for t in r.get("tasks", []) if t.get("action") in ENV_ACTIONS and t.get("status") != "skipped"]
        if r.get("builds"):  # staged environments (docs/staged.md): the stage first, the switch last
            for t in (t for t in envs if t["action"] != "venv_switch"):
                out.append(_env_row(host, t))
        for b in r.get("builds", []):
            style = {"skip": "green", "push": "cyan", "fail": "red"}.get(b["action"], "yellow")
            out.append([host, b["task"], Text(b["action"], style=style), str(b.get("archs") or ""),
                        b.get("key", ""), ", ".join(b["changed"]) or b.get("why", "")])
            out.extend([host, f"  dependency {d.get('name', '?')}", Text(dep_state(d)), "", "", dep_line(d)]
                       for d in b.get("deps") or [])
        if r.get("builds"):
            for t in (t for t in envs if t["action"] == "venv_switch"):
                out.append(_env_row(host, t))
        if not r.get("builds"):
            for t in r.get("tasks", []):
                d = t.get("decision") or {}
                out.append([host, t["task"], Text(str(d.get("action") or t["status"])), "", "", t.get("msg", "")])
    for row, *names in failing.values():
        row[0] = fold_hosts(names)
    cols = [("host", True, "left"), ("task", False, "left"), ("action", True, "left"), ("arch list", True, "left"),
            ("class", True, "left"), ("changed inputs / cause", False, "left")]
    print_table(console, title, cols, out, nested=True, whole_when_piped=True)
