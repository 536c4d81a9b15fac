"""Tables for the terminal (rich): facts, the run summary, the plan, arch classes."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from .terminal import STYLE


def facts_table(facts: dict[str, dict[str, Any]]) -> Table:
    """One row per host: GPUs and SMs, arch list, CUDA, Python/torch, cores, memory, disk."""
    table = Table(title="facts", show_lines=False)
    for col in ("host", "gpus", "arch list", "cuda", "python / torch", "cores", "mem GiB", "disk free GiB", "max jobs"):
        table.add_column(col)
    for host, f in facts.items():
        if not f.get("reachable", True) or "error" in f and "gpus" not in f:
            table.add_row(host, Text(f"UNREACHABLE: {f.get('error')}", style="red"), "", "", "", "", "", "", "")
            continue
        gpus = f.get("gpus") or []
        gpu_s = ", ".join(f"{g.get('name')} ({g.get('compute_cap')})" for g in gpus) or "none"
        build = f.get("build") or {}
        cuda = f.get("cuda") or {}
        py = f.get("python") or {}
        table.add_row(
            host, gpu_s, str(build.get("torch_cuda_arch_list", "")),
            f"{cuda.get('version') or '-'} {cuda.get('home') or ''}",
            f"{py.get('version') or '-'} / torch {py.get('torch') or '-'} (cu {py.get('torch_cuda') or '-'})",
            str(f.get("cpu_count", "")), f"{(f.get('mem_total_mib') or 0) / 1024:.0f}",
            f"{(f.get('disk_free_mib') or 0) / 1024:.0f}", str(build.get("max_jobs", "")),
        )
    return table


def summary_table(results: dict[str, dict[str, Any]], run_id: str, *, fold: bool = False) -> Table:
    """Host, status per task, duration, and the first error line of each failure. With ``fold``,
    hosts with the same statuses and error share one row under their folded host set."""
    from ..inventory import fold_hosts

    table = Table(title=f"run {run_id}")
    table.add_column("hosts" if fold else "host", style="cyan")
    table.add_column("status")
    table.add_column("tasks")
    table.add_column("duration s", justify="right")
    table.add_column("first error")
    rows: dict[tuple, list[tuple[str, float]]] = {}
    for host, r in results.items():
        marks = "".join(t["status"][0].upper() for t in r.get("tasks", []))
        key = (r.get("status", "?"), marks, (r.get("error") or "")[:160]) if fold else (host,)
        rows.setdefault(key, []).append((host, float(r.get("duration_s", 0) or 0)))
    for key, members in rows.items():
        host = members[0][0]
        r = results[host]
        marks = Text()
        for t in r.get("tasks", []):
            marks.append(t["status"][0].upper(), style=STYLE.get(t["status"], ""))
        status = r.get("status", "?")
        durations = [d for _, d in members]
        dur = f"{durations[0]:.1f}" if len(durations) == 1 else f"{min(durations):.1f}-{max(durations):.1f}"
        table.add_row(fold_hosts([h for h, _ in members]) if fold else host, Text(status, style=STYLE.get(status, "")),
                      marks, dur, (r.get("error") or "")[:160])
    return table


def build_classes(results: dict[str, dict[str, Any]]) -> list[str]:
    """One line per arch class, hosts folded the way ClusterShell prints node sets:
    ``gpu[01-12] sm_120a cu13.0 torch2.12 cp312 (built on gpu01)``."""
    from ..inventory import fold_hosts

    classes: dict[str, dict[str, Any]] = {}
    for host, r in results.items():
        for t in r.get("tasks", []):
            data = t.get("data") or {}
            if t.get("action") != "build_wheel" or not data.get("key") or t.get("status") == "skipped":
                continue
            c = classes.setdefault(data["key"], {"hosts": [], "data": data, "builder": None})
            c["hosts"].append(host)
            if not data.get("pushed_from") and not data.get("reused"):
                c["builder"] = host
            elif data.get("pushed_from"):
                c["builder"] = c["builder"] or data["pushed_from"]
    lines = []
    for c in classes.values():
        d = c["data"]
        inputs = d.get("inputs") or {}
        torch = ".".join(str(inputs.get("torch") or "?").split("+")[0].split(".")[:2])
        sass = " ".join(d.get("sass") or [f"arch {d.get('archs')}"])
        how = f"built on {c['builder']}" if c["builder"] else "reused"
        lines.append(f"{fold_hosts(c['hosts'])} {sass} cu{inputs.get('cuda')} torch{torch} {inputs.get('python')} ({how})")
    return lines


def plan_rows(hosts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per host, ``--plan``'s view of a planned run: ``{"status", "error"?, "builds": [...],
    "tasks": [...]}``. A build row's ``action`` is ``build``, ``push`` (the class's wheel comes
    from another member), ``reinstall`` (this host holds the wheel but another is installed) or
    ``skip`` (the wheel for exactly these inputs is installed); ``changed`` names the inputs that
    differ from the installed wheel's."""
    out: dict[str, dict[str, Any]] = {}
    for host, r in hosts.items():
        tasks = [t for t in r.get("tasks", []) if t.get("action") != "facts"]
        row: dict[str, Any] = {"status": "ok" if r.get("status") in ("ok", "running") else r.get("status"),
                               "tasks": [{"task": t["name"], "action": t["action"], "status": t["status"],
                                          "decision": (t.get("data") or {}).get("decision"), "msg": t.get("msg", "")}
                                         for t in tasks]}
        if r.get("error"):
            row["error"] = r["error"]
        installs = [t for t in tasks if t.get("action") == "pip_install"]
        builds = []
        for t in tasks:
            if t.get("action") != "build_wheel":
                continue
            d = (t.get("data") or {}).get("decision") or {}
            role = d.get("action")
            if role in ("reuse", "serve"):
                inst = ((installs[0].get("data") or {}).get("decision") or {}).get("action") if installs else None
                action = "skip" if inst == "skip" or (inst is None and d.get("installed")) else "reinstall"
            elif role == "fail" or t.get("status") == "failed":
                action = "fail"
            else:
                action = role or "build"
            builds.append({"task": t["name"], "key": d.get("key", ""), "action": action,
                           "changed": d.get("changed", []), "archs": d.get("archs"), "msg": t.get("msg", "")})
        row["builds"] = builds
        out[host] = row
    return out


def plan_table(title: str, rows: dict[str, dict[str, Any]]) -> Table:
    """``--plan``'s table: host, task, action, arch list, class, changed inputs or the failure."""
    table = Table(title=title)
    for col in ("host", "task", "action", "arch list", "class", "changed inputs / cause"):
        table.add_column(col, overflow="fold")
    for host, r in rows.items():
        if r.get("status") != "ok":
            table.add_row(host, "", Text(str(r.get("status", "?")), style="red"), "", "", r.get("error", ""))
            continue
        for b in r.get("builds", []):
            style = {"skip": "green", "push": "cyan", "fail": "red"}.get(b["action"], "yellow")
            table.add_row(host, b["task"], Text(b["action"], style=style), str(b.get("archs") or ""),
                          b.get("key", ""), ", ".join(b["changed"]))
        if not r.get("builds"):
            for t in r.get("tasks", []):
                d = t.get("decision") or {}
                table.add_row(host, t["task"], Text(str(d.get("action") or t["status"])), "", "", t.get("msg", ""))
    return table
