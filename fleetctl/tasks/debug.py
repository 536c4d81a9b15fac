"""``debug``: put a message (any value, rendered) into the run record; changes nothing."""

from __future__ import annotations

from typing import Any

from ..status import Status
from .argtypes import ActionArgs
from .base import Action, HostView, Plan, TaskResult
from .steps import Emit


class DebugArgs(ActionArgs):
    """``debug``: emit ``msg`` as a ``debug.message`` event."""

    msg: Any = ""


def plan(args: DebugArgs, host: HostView) -> Plan:
    """One event; OK."""
    yield Emit(name="debug.message", data={"msg": args.msg})
    return TaskResult(Status.OK, msg=str(args.msg))


ACTION = Action(name="debug", args=DebugArgs, phase="command", timeout_s=60.0, plan=plan, runs_commands=False)
