"""``command``: run one argv on the host exactly as given, without a shell (Ansible's ``command``)."""

from __future__ import annotations

from pydantic import Field, field_validator

from ..status import Status
from .argtypes import ActionArgs, argv_list, is_template
from .base import Action, HostView, Plan, TaskResult, result_of
from .steps import Run, probe


class CommandArgs(ActionArgs):
    """``command``: run one argv on the host, without a shell.

    Attributes:
        argv: the program and its arguments, a non-empty list (numbers become strings). A plain
            string is an error: use a list, or the ``shell`` action.
        cwd: remote working folder; ``None`` means the login folder.
        creates: remote path; when it exists the task is skipped (Ansible's ``creates``).
    """

    argv: list[str] = Field(min_length=1)
    cwd: str | None = None
    creates: str | None = None

    @field_validator("argv", mode="before")
    @classmethod
    def _argv(cls, v: object) -> object:
        if isinstance(v, str) and not is_template(v):
            raise ValueError(
                "argv must be a list of strings, not a string (write [prog, arg, ...], "
                "or use the shell action)"
            )
        return argv_list(v, "argv")


def plan(args: CommandArgs, host: HostView) -> Plan:
    """Run the argv; SKIPPED when ``creates`` already exists on the host."""
    if args.creates:
        found = yield probe(["test", "-e", args.creates], f"skip when {args.creates} exists")
        if found.rc == 0:
            return TaskResult(Status.SKIPPED, msg=f"{args.creates} exists",
                              data={"decision": {"action": "skip", "why": f"{args.creates} exists"}})
    res = yield Run(argv=tuple(args.argv), cwd=args.cwd)
    out = result_of(res)
    out.data["decision"] = {"action": "run"}
    return out


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`run`, or `skip` with `creates` naming a path that exists (`PATH exists`); `--dry-run` lists the "
    "argv."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: List the GPUs
  command: [nvidia-smi, -L]
  register: gpus
  timeout: 30
"""

ACTION = Action(name="command", args=CommandArgs, phase="command", timeout_s=600.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
