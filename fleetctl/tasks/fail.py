"""``fail``: fail the host with a message (usually under a ``when``), as Ansible's ``fail``."""

from __future__ import annotations

from .argtypes import ActionArgs
from .base import Action, HostView, Plan, TaskResult
from ..status import Status


class FailArgs(ActionArgs):
    """``fail``: fail the host with ``msg``."""

    msg: str = "Failed as requested"


def plan(args: FailArgs, host: HostView) -> Plan:
    """Fail at once: no step."""
    return TaskResult(Status.FAILED, msg=str(args.msg), data={"decision": {"action": "fail"}})
    yield  # a generator with no step


ACTION = Action(name="fail", args=FailArgs, phase="command", timeout_s=60.0, plan=plan, runs_commands=False)
