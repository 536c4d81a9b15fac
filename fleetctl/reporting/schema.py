"""The published schemas of the run record (``docs/schema/``), generated from the code.

``run.schema.json`` is the JSON Schema of ``run.json`` (from :class:`fleetctl.engine.model.RunModel`);
``events.schema.json`` is the JSON Schema of one line of ``events.jsonl``: an envelope (``event``,
``run_id``, ``timestamp``, ``level``, ``host``) plus, per event name in :data:`EVENTS`, its fields.
Both carry ``schema_version`` (:data:`fleetctl.engine.model.SCHEMA_VERSION`); alerting and reports read
them. ``python -m fleetctl.reporting.schema DIR`` writes them; a test keeps ``docs/schema/`` equal to
what this module generates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..engine.model import SCHEMA_VERSION, RunModel

S, I, N, B, A, O = "string", "integer", "number", "boolean", "array", "object"

#: event name -> (its fields and their JSON types (a list: any of them), what it means).
EVENTS: dict[str, tuple[dict[str, Any], str]] = {
    "run.started": ({"kind": S, "mode": S, "hosts": I, "tasks": A, "batches": A}, "the run began"),
    "run.finished": ({"status": S}, "the run ended: ok, failed, interrupted or refused"),
    "run.stopped": ({"reason": S}, "later batches were not started (max_fail_percentage)"),
    "run.observer_failed": ({"observer": S, "error": S},
                            "a reporter raised and was dropped (a fault of fleetctl): the run went on"),
    "batch.started": ({"batch": I, "of": I, "hosts": A}, "a rolling batch began"),
    "host.started": ({}, "work on the host began"),
    "host.finished": ({"status": S, "error": [S, "null"], "duration_s": N, "rc": [I, "null"], "files": I,
                       "bytes": I},
                      "the host is done (files, bytes: copy and fetch, what was moved)"),
    "host.refused": ({"task": S, "msg": S}, "planning found a failure before anything would run: nothing applied"),
    "host.interrupted": ({}, "the run was interrupted while the host was in progress"),
    "facts.gathered": ({"gpus": I, "arch_list": [S, "null"]}, "facts were gathered"),
    "note.added": ({"message": S}, "a notice about the host (shown once per identical message)"),
    "task.started": ({"task": S, "index": I, "total": I, "action": S, "phase": S, "selected": B}, "a task began"),
    "task.finished": ({"task": S, "action": S, "phase": S, "status": S, "rc": [I, "null"], "duration_s": N,
                       "msg": S, "start_s": N}, "a task ended"),
    "task.retrying": ({"task": S, "attempt": I, "msg": S}, "a task failed and is tried again"),
    "task.crashed": ({"task": S, "action": S, "traceback": S},
                     "a planner raised (a fault of fleetctl): the task failed on this host alone"),
    "command.started": ({"task": S, "argv": A, "cwd": [S, "null"], "probe": B, "prefetched": B},
                        "a command started on the host (prefetched: a probe the host's first command answered ahead; an "
                        "argument of 1024 chars or more is '@scripts/SHA.txt (N chars)', its text in the run's scripts/)"),
    "command.finished": ({"task": S, "argv0": S, "rc": [I, "null"], "signal": [S, "null"], "duration_s": N},
                         "a command ended"),
    "step.planned": ({"task": S, "step": O}, "a dry run recorded a step instead of doing it"),
    "build.started": ({"task": S, "tool": S, "archs": [S, "null"], "max_jobs": I, "attempt": I}, "a build began"),
    "build.oom_retry": ({"task": S, "max_jobs": I, "next_max_jobs": I},
                        "the compiler was killed for memory: built again with fewer jobs"),
    "class.published": ({"key": S, "wheel": S, "sha256": S}, "an arch class's wheel reached the controller's cache"),
    "class.builder_changed": ({"key": S}, "the class's builder went away: this host builds instead"),
    "class.waiting": ({"waiting_for": A, "grace_s": N, "reason": S},
                      "the host planned and waits for its group's hosts still gathering facts or planning "
                      "(waiting_for) before its arch class is settled, at most grace_s seconds"),
    "class.serve_failed": ({"task": S, "key": S, "error": S}, "a host holding the class's wheel could not hand it on"),
    "debug.message": ({"task": S, "msg": {}}, "a debug task's message"),
    "lock.stale_taken_over": ({"previous": O, "path": S}, "the lock of a dead run was taken over"),
    "lock.lost": ({"message": S, "holder": O}, "the host's deploy lock was lost during the run and another run "
                  "holds it now (the host fails)"),
    "lock.acquired": ({"path": S}, "the deploy lock on the host is held for this run"),
    "lock.refused": ({"path": [S, "null"], "error": S}, "the host's deploy lock is held by another run or cannot be taken"),
    "connection.opened": ({}, "what reaching the host took (handshake retries, jump hosts, keys recorded)"),
    "connection.failed": ({}, "what the failed attempt to reach the host took"),
    "probes.answered_ahead": ({"count": I, "of": I, "kept": I},
                              "the host's first command answered probes its planners asked last time "
                              "(kept: of them, answers the host kept from an earlier run, their files unchanged)"),
}


def run_schema() -> dict[str, Any]:
    """The JSON Schema of ``run.json``."""
    schema = RunModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://fleetctl.dev/schema/run.v{SCHEMA_VERSION}.json"
    schema["title"] = "fleetctl run.json"
    return schema


def _typed(t: Any) -> dict[str, Any]:
    if t == {}:
        return {}
    return {"type": t}


def events_schema() -> dict[str, Any]:
    """The JSON Schema of one line of ``events.jsonl``."""
    envelope = {
        "event": {"type": "string", "description": "noun.verb_past"},
        "run_id": {"type": "string"},
        "timestamp": {"type": "string", "description": "ISO 8601, UTC"},
        "level": {"type": "string"},
        "host": {"type": "string", "description": "the inventory host the event is about"},
    }
    cases = []
    for name, (fields, meaning) in EVENTS.items():
        cases.append({
            "if": {"properties": {"event": {"const": name}}},
            "then": {"description": meaning, "properties": {k: _typed(t) for k, t in fields.items()}},
        })
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://fleetctl.dev/schema/events.v{SCHEMA_VERSION}.json",
        "title": "fleetctl events.jsonl line",
        "description": f"schema_version {SCHEMA_VERSION}; events not listed may appear and carry their own fields",
        "type": "object",
        "required": ["event", "run_id", "timestamp", "level"],
        "properties": envelope,
        "allOf": cases,
    }


def write(folder: Path) -> list[Path]:
    """Write both schemas into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, doc in (("run.schema.json", run_schema()), ("events.schema.json", events_schema())):
        path = folder / name
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        out.append(path)
    return out


if __name__ == "__main__":  # pragma: no cover - a maintenance command
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schema")):
        print(p)
