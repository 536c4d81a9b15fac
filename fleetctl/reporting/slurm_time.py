"""``--plan``'s warning: a Slurm host whose ``slurm_time`` is shorter than its class's last build took.

Slurm cancels a job at its time limit (``salloc --time``, from the host var ``slurm_time``), build
or not: ``*** STEP J.S ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***``. The run records know how
long each arch class's build took (a ``build_wheel`` task that built, its ``duration_s`` and the
class key in ``data.decision.key``), so a plan that would build a class can say beforehand that
the limit will not do.

Slurm's time formats (sbatch(1), ``--time``): ``minutes``, ``minutes:seconds``,
``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``;
``UNLIMITED``/``INFINITE`` have no limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def slurm_time_s(value: object) -> float | None:
    """Seconds of a Slurm time limit, or ``None`` for no limit or a value Slurm would refuse
    (:func:`fleetctl.connection.slurm_settings.time_limit_s`, which the inventory already ran)."""
    from ..connection.slurm_settings import time_limit_s
    try:
        return time_limit_s(value)
    except ValueError:
        return None


def last_builds(records: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, str, str]]:
    """``{class key: (seconds, run id, host)}`` of the newest build of each class in ``records``
    (run.json documents, newest first; plans and dry runs built nothing and are skipped)."""
    out: dict[str, tuple[float, str, str]] = {}
    for rec in records:
        if rec.get("mode", "apply") != "apply":
            continue
        for host, outcome in (rec.get("hosts") or {}).items():
            for task in outcome.get("tasks") or []:
                if task.get("action") != "build_wheel" or task.get("status") != "changed":
                    continue
                decision = (task.get("data") or {}).get("decision") or {}
                key, took = decision.get("key"), task.get("duration_s")
                if key and decision.get("action") == "build" and isinstance(took, (int, float)) and key not in out:
                    out[key] = (float(took), str(rec.get("run_id", "?")), host)
    return out


def slurm_time_warnings(rows: Mapping[str, Mapping[str, Any]], host_vars: Mapping[str, Mapping[str, Any]],
                        builds: Mapping[str, tuple[float, str, str]]) -> dict[str, str]:
    """``{host: warning}`` for each host the plan has build (its class's builder) whose
    ``slurm_time`` is shorter than the last build of that class took.

    Args:
        rows: :func:`fleetctl.reporting.plan_table.plan_rows`' rows.
        host_vars: each host's inventory vars (``slurm_time``).
        builds: :func:`last_builds`.
    """
    out: dict[str, str] = {}
    for host, row in rows.items():
        limit_text = (host_vars.get(host) or {}).get("slurm_time")
        limit = slurm_time_s(limit_text) if limit_text is not None else None
        if limit is None:
            continue
        for b in row.get("builds") or []:
            if not str(b.get("action", "")).startswith("build") or b.get("key") not in builds:
                continue
            took, run_id, builder = builds[b["key"]]
            if took > limit:
                out[host] = (f"slurm_time={limit_text} ({limit:g} s) is shorter than the last build of this class "
                             f"took ({took:.0f} s, on {builder} in run {run_id}): Slurm would cancel the job at its "
                             f"time limit mid-build; raise slurm_time")
    return out
