"""``fail``: fail the host with a message (usually under a ``when``), as Ansible's ``fail``."""

from __future__ import annotations

from .argtypes import ActionArgs
from .base import Action, HostView, Plan, TaskResult
from ..status import Status


class FailArgs(ActionArgs):
    """``fail``: fail the host with ``msg``.

    Attributes:
        msg: the failure's one line (the host's cause in the summary and the run record).
    """

    msg: str = "Failed as requested"


def plan(args: FailArgs, host: HostView) -> Plan:
    """Fail at once: no step."""
    return TaskResult(Status.FAILED, msg=str(args.msg), data={"decision": {"action": "fail"}})
    yield  # a generator with no step


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`fail` with the message when its `when` holds on the host, else `skipped`."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Refuse hosts without a GPU
  fail:
    msg: "{{ host }} has no GPU"
  when: facts.gpus | length == 0
"""

ACTION = Action(name="fail", args=FailArgs, phase="command", timeout_s=60.0, plan=plan, runs_commands=False,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
