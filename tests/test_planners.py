"""Planners as data, as pyinfra's operation tests: arguments + facts + probe answers -> steps.

Each file under ``tests/data/planners/<action>/`` holds one case:

- ``args``: the action's arguments (validated with its model);
- ``host``: the :class:`~fleetctl.tasks.base.HostView` fields (``facts``, ``venv``, ``files``...);
- ``steps``: in order, what the planner must yield (``expect``: the step's type and any of its
  fields, compared exactly) and what it receives back (``answer``: a command result
  ``{rc, stdout, stderr, signal}``, a string, ``null``, or ``{"error": "..."}`` for a failed transfer);
- ``result``: the task result's ``status``, and optionally ``msg`` (a substring), ``decision``
  (a subset of ``data["decision"]``) and ``preflight`` (the refusal stops the host while planning).

The planners are pure, so these run in milliseconds with no host at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleetctl.connection.base import CommandResult
from fleetctl.errors import TransferError
from fleetctl.tasks import ACTIONS
from fleetctl.tasks import steps as S
from fleetctl.tasks.base import HostView, TaskResult

DATA = Path(__file__).parent / "data" / "planners"
CASES = sorted(DATA.glob("*/*.json"))


def _host(spec: dict[str, Any]) -> HostView:
    base = {"name": "h1", "facts": {}, "venv": "/venv", "python": "/venv/bin/python3", "workdir": "/w",
            "run_dir": "/w/runs/r1", "playbook_dir": Path("/p"), "project_root": Path(__file__).parents[1]}
    base.update({k: (Path(v) if k in ("playbook_dir", "project_root") else v) for k, v in spec.items()})
    if "python" not in spec and base.get("venv"):
        base["python"] = f"{base['venv']}/bin/python3"
    return HostView(**base)


def _answer(step: S.Step, answer: Any) -> Any:
    if isinstance(step, S.Run):
        a = answer or {}
        return CommandResult(argv=list(step.argv), rc=a.get("rc", 0), stdout=a.get("stdout", "").encode(),
                             stderr=a.get("stderr", "").encode(), signal=a.get("signal"))
    if isinstance(answer, dict) and set(answer) == {"error"}:
        return TransferError(answer["error"])
    if isinstance(step, S.PutFiles) and answer is None:
        return [None] * len(step.files)
    if isinstance(step, S.Fetch) and isinstance(answer, dict):
        return S.ClassWheel(**answer)
    return answer


def _fields(step: S.Step) -> dict[str, Any]:
    out = {"type": type(step).__name__}
    for name in ("argv", "env", "cwd", "remote", "local", "key", "holds", "once", "mutating", "name", "dest", "wheel"):
        if hasattr(step, name):
            value = getattr(step, name)
            out[name] = list(value) if isinstance(value, tuple) else dict(value) if hasattr(value, "items") else value
    return out


def run_case(case: dict[str, Any]) -> tuple[TaskResult, list[dict[str, Any]]]:
    """Drive the planner with the case's answers; return its result and every step it yielded."""
    action = ACTIONS[case["action"]]
    args = action.args.model_validate(case.get("args", {}))
    plan = action.plan(args, _host(case.get("host", {})))
    expected = list(case.get("steps", []))
    seen = []
    try:
        step = next(plan)
        while True:
            got = _fields(step)
            seen.append(got)
            assert expected, f"unexpected extra step {got}"
            want = expected.pop(0)
            for key, value in want.get("expect", {}).items():
                assert got.get(key) == value, f"step {len(seen)}: {key} is {got.get(key)!r}, expected {value!r}"
            step = plan.send(_answer(step, want.get("answer")))
    except StopIteration as stop:
        assert not expected, f"the planner stopped with {len(expected)} expected steps left: {expected[0]}"
        return stop.value, seen


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_planner_case(path: Path) -> None:
    case = json.loads(path.read_text())
    result, _ = run_case(case)
    want = case["result"]
    assert result.status.value == want["status"], result.msg
    if "msg" in want:
        assert want["msg"] in result.msg, result.msg
    for key, value in want.get("decision", {}).items():
        assert result.data.get("decision", {}).get(key) == value, result.data.get("decision")
    if "preflight" in want:
        assert result.preflight is want["preflight"], result.preflight
    for key, value in want.get("data", {}).items():  # null: the key must be absent
        assert result.data.get(key) == value, (key, result.data)


def test_every_action_has_a_case() -> None:
    assert {p.parent.name for p in CASES} >= set(ACTIONS) - {"debug"}


def _first_difference(want: Any, got: Any, where: str = "") -> str:
    """The JSON path of the first place two decoded cases differ, and both values there."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in [*want, *(k for k in got if k not in want)]:
            if key not in want or key not in got:
                return f"{where}.{key}: committed {want.get(key, '(absent)')!r}, generated {got.get(key, '(absent)')!r}"
            if want[key] != got[key]:
                return _first_difference(want[key], got[key], f"{where}.{key}")
        return f"{where}: the same keys in another order"
    if isinstance(want, list) and isinstance(got, list):
        for i, (w, g) in enumerate(zip(want, got)):
            if w != g:
                return _first_difference(w, g, f"{where}[{i}]")
        return f"{where}: committed {len(want)} items, generated {len(got)}"
    return f"{where or '(top)'}: committed {want!r}, generated {got!r}"


def _some(names: set[str], shown: int = 5) -> str:
    listed = ", ".join(sorted(names)[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


def test_the_generator_writes_exactly_the_committed_cases(tmp_path: Path) -> None:
    """make_cases.py is how cases are changed on purpose: it must reproduce every committed case byte for
    byte and write none that is not committed, or rerunning it would silently rewrite correct cases."""
    run = subprocess.run([sys.executable, str(DATA / "make_cases.py"), str(tmp_path)], capture_output=True, text=True,
                         cwd=DATA.parents[2], env={"PYTHONPATH": str(DATA.parents[2]), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json")}
    committed = {p.relative_to(DATA).as_posix() for p in CASES}
    assert not written - committed, f"make_cases.py writes cases that are not committed: {_some(written - committed)}"
    assert not committed - written, f"committed cases make_cases.py does not write: {_some(committed - written)}"
    for name in sorted(committed):
        want, got = (DATA / name).read_text(), (tmp_path / name).read_text()
        if want != got:
            try:
                w, g = json.loads(want), json.loads(got)
                where = _first_difference(w, g) if w != g else "the same JSON in other bytes (indent, key order, newline)"
            except ValueError as e:
                where = f"one of them is not JSON ({e})"
            raise AssertionError(f"make_cases.py writes {name} unlike the committed case: {where}")
