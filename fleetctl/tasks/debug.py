"""``debug``: put a message (any value, rendered) into the run record; changes nothing."""

from __future__ import annotations

from typing import Any

from ..status import Status
from .argtypes import ActionArgs
from .base import Action, HostView, Plan, TaskResult
from .steps import Emit


class DebugArgs(ActionArgs):
    """``debug``: emit ``msg`` as a ``debug.message`` event.

    Attributes:
        msg: any value (a template renders per host); shown as the task's message.
    """

    msg: Any = ""


def plan(args: DebugArgs, host: HostView) -> Plan:
    """One event; OK."""
    yield Emit(name="debug.message", data={"msg": args.msg})
    return TaskResult(Status.OK, msg=str(args.msg))


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`ok` with the rendered message."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Show the build plan
  debug:
    msg: "{{ host }}: {{ facts.build.torch_cuda_arch_list }}, {{ facts.build.max_jobs }} jobs"
"""

ACTION = Action(name="debug", args=DebugArgs, phase="command", timeout_s=60.0, plan=plan, runs_commands=False,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
