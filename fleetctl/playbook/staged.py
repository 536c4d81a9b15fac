"""``--staged``: any play, run in a staged environment (see docs/staged.md).

The play's tasks are framed by a ``venv_stage`` task (first) and a ``venv_switch`` task (last), both
tagged ``always``: the tasks run in the next version of the host's venv, made beside the live one,
and the live venv is switched to it only when every task passed. A play that already stages
(``playbooks/nightly.yaml``) is left as written. The added tasks are ordinary tasks, so ``--plan``,
``--dry-run``, the run record and the report show them like any other.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import PlaybookError
from ..tasks import ACTIONS
from .model import Playbook, Task
from .task_parser import TaskParser

STAGE_NAME = "Stage the next environment beside the live venv (--staged)"
SWITCH_NAME = "Switch the live venv to the staged environment (--staged)"


def stages(playbook: Playbook) -> bool:
    """The play has its own ``venv_stage`` task."""
    return any(t.action == "venv_stage" for t in playbook.tasks)


def _task(name: str, action: str, raw: dict, index: int, playbook: Playbook) -> Task:
    spec = ACTIONS[action]

    def fail(message: str, sub=()):  # pragma: no cover - the arguments above are fixed and valid
        raise PlaybookError(f"--staged: {message}")

    return Task(name=name, action=action, args=TaskParser._validate_args(action, raw, fail), raw_args=raw,
                timeout_s=spec.timeout_s, tags=frozenset({"always"}), file=str(playbook.path),
                label=f"--staged ({action})", index=index)


def staged_playbook(playbook: Playbook) -> Playbook:
    """``playbook`` with a ``venv_stage`` task first and a ``venv_switch`` task last (unchanged
    when it stages on its own)."""
    if stages(playbook):
        return playbook
    stage = _task(STAGE_NAME, "venv_stage", {"versions_dir": "{{ venv_versions_dir | default('') }}"}, 0, playbook)
    inner = [replace(t, index=i + 1) for i, t in enumerate(playbook.tasks)]
    switch = _task(SWITCH_NAME, "venv_switch", {"to": "staged", "keep": "{{ venv_keep | default(3) }}"},
                   len(inner) + 1, playbook)
    return replace(playbook, tasks=[stage, *inner, switch])
