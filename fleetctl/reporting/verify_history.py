"""What ``--plan`` knows of a host's last deploy: whether it failed at ``verify``.

``--plan`` cannot run ``verify`` (it changes nothing; the check runs after the install, on
apply), so a host whose install is current but whose last deploy of the same playbook failed at
verify is not "up to date": the plan says so from the run records
(:func:`fleetctl.reporting.history.list_runs`) instead of "nothing changed".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any


def _same_path(a: object, b: object) -> bool:
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def failed_at_verify(runs: Iterable[Mapping[str, Any]], hosts: Iterable[str], playbook: str) -> dict[str, tuple[str, str]]:
    """Per host of ``hosts`` whose newest applied deploy of ``playbook`` (run records, newest
    first) failed at a ``verify`` task: ``(run_id, that task's message)``. Hosts whose newest
    such deploy passed, failed elsewhere, or that no deploy reached are left out. Never raises
    on a malformed record (it is skipped)."""
    todo = set(hosts)
    out: dict[str, tuple[str, str]] = {}
    for run in runs:
        if not todo:
            break
        if not isinstance(run, Mapping) or run.get("kind") != "deploy" or run.get("mode", "apply") != "apply":
            continue
        if not _same_path(run.get("playbook"), playbook):
            continue
        for host, rec in (run.get("hosts") or {}).items():
            if host not in todo or not isinstance(rec, Mapping):
                continue
            todo.discard(host)
            failed = [t for t in rec.get("tasks") or [] if isinstance(t, Mapping) and t.get("status") == "failed"]
            if failed and failed[0].get("action") == "verify":
                out[host] = (str(run.get("run_id", "?")), str(failed[0].get("msg") or ""))
    return out
