"""``fail``: fail the host with a message (usually under a ``when``), as Ansible's ``fail``;
``unless_exists`` makes it a check of a path on the host (Ansible's ``stat`` + ``fail``, in one task)."""

from __future__ import annotations

from .argtypes import ActionArgs
from .base import Action, HostView, Plan, TaskResult
from .steps import probe
from ..status import Status


class FailArgs(ActionArgs):
    """``fail``: fail the host with ``msg``.

    Attributes:
        msg: the failure's one line (the host's cause in the summary and the run record).
        unless_exists: remote path; when it exists (``test -e``) the task is skipped, else it fails
            with ``msg``. A read-only probe, answered in a dry run too, so ``--dry-run`` predicts
            the failure the real run would have (a ``command`` that exits 1 is only simulated).
    """

    msg: str = "Failed as requested"
    unless_exists: str | None = None


def plan(args: FailArgs, host: HostView) -> Plan:
    """Fail, unless ``unless_exists`` names a path that exists on the host (then SKIPPED)."""
    if args.unless_exists:
        found = yield probe(["test", "-e", args.unless_exists], f"fail unless {args.unless_exists} exists")
        if found.rc == 0:
            return TaskResult(Status.SKIPPED, msg=f"{args.unless_exists} exists",
                              data={"decision": {"action": "skip", "why": f"{args.unless_exists} exists"}})
    return TaskResult(Status.FAILED, msg=str(args.msg), data={"decision": {"action": "fail"}})


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`fail` with the message when its `when` holds on the host, else `skipped`; with `unless_exists`, "
    "`skip` when that path exists on the host (`PATH exists`), asked in a dry run too."
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
